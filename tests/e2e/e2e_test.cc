// End-to-end: real ps_server, ps_worker and ps_launch processes on loopback.
// Every process is a Subprocess, which kills and reaps it when the test ends,
// whatever happens.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <sstream>
#include <thread>

#include "client/client.h"
#include "client/control_client.h"
#include "common/endpoint.h"
#include "common/config.h"
#include "common/subprocess.h"
#include "server/checkpoint.h"
#include "tests/util/etcd_server.h"
#include "tests/util/free_port.h"
#include "tests/util/status_matchers.h"
#include "worker/backend_factory.h"
#include "worker/progress.h"

namespace ps {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using Steady = std::chrono::steady_clock;

const std::string kServer = std::string(PS_BINARY_DIR) + "/bin/ps_server";
const std::string kWorker = std::string(PS_BINARY_DIR) + "/bin/ps_worker";
const std::string kLaunch = std::string(PS_BINARY_DIR) + "/bin/ps_launch";
const std::string kCtl = std::string(PS_BINARY_DIR) + "/bin/ps_ctl";

class E2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ps_e2e_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    procs_.clear();  // SIGKILL + reap anything still running
    fs::remove_all(dir_);
  }

  // Writes a job with `shards` servers on fresh ports and returns its path.
  std::string WriteJob(int shards, int workers, const std::string& rest) {
    ports_.clear();
    std::string servers;
    for (int i = 0; i < shards; ++i) {
      ports_.push_back(FreePort());
      servers += (i ? ", " : "") + std::string("\"127.0.0.1:") + std::to_string(ports_.back()) + "\"";
    }
    std::string path = (dir_ / "job.yaml").string();
    std::ofstream(path) << "cluster: { servers: [" << servers << "], workers: " << workers
                        << " }\n" << rest;
    return path;
  }

  // A job file `name`.yaml of `servers` servers and 2 replica_pusher
  // workers, which push integers to a range table (10000 rows) and to 5000
  // ids of a hashed one under bsp and stop at clock `stop`; `checkpoint`
  // is the job's checkpoint section (a YAML flow map).
  std::string PusherJob(int servers, const std::string& name, int64_t stop,
                        const std::string& checkpoint) {
    const std::string pusher = std::string(PS_BINARY_DIR) + "/bin/replica_pusher";
    const std::string stop_file = (dir_ / (name + ".stop")).string();
    std::ofstream(stop_file) << stop << "\n";
    const std::string path = WriteJob(
        servers, 2,
        "tables:\n"
        "  - { name: acc, rows: 10000, dim: 1, optimizer: { type: add } }\n"
        "  - { name: ids, keys: hashed, dim: 1, max_rows: 100000, optimizer: { type: add } }\n"
        "consistency: { mode: bsp }\n"
        "checkpoint: " + checkpoint + "\n"
        "train: { command: [" + pusher + ", --stop-file, " + stop_file + "] }\n");
    const std::string named = (dir_ / (name + ".yaml")).string();
    fs::rename(path, named);
    return named;
  }
  // A job file `name`.yaml for a reshard test: the first `servers` of
  // `ports` (the files of one test share addresses), 2 replica_pushers
  // that pull every clock (--pull-each-clock) and stop at the clock in
  // `stop_file`, a range table and, with `hashed`, a hashed one, bsp,
  // checkpoints in `ckpt` every `every_clocks`; `more` is appended (YAML
  // sections).
  std::string ReshardJob(const std::vector<int>& ports, int servers, const std::string& name,
                         const std::string& ckpt, const std::string& stop_file, bool hashed,
                         int every_clocks, const std::string& more = "") {
    const std::string pusher = std::string(PS_BINARY_DIR) + "/bin/replica_pusher";
    std::string list;
    for (int i = 0; i < servers; ++i) {
      list += (i ? ", " : "") + std::string("\"127.0.0.1:") + std::to_string(ports[i]) + "\"";
    }
    const std::string path = (dir_ / (name + ".yaml")).string();
    std::ofstream(path)
        << "cluster: { servers: [" << list << "], workers: 2 }\n"
        << "tables:\n  - { name: acc, rows: 10000, dim: 1, optimizer: { type: add } }\n"
        << (hashed ? "  - { name: ids, keys: hashed, dim: 1, max_rows: 100000, "
                     "optimizer: { type: add } }\n"
                   : "")
        << "consistency: { mode: bsp }\n"
        << "checkpoint: { dir: " << ckpt << ", every_clocks: " << every_clocks
        << ", sync: false }\n"
        << "train: { command: [" << pusher << ", --pull-each-clock, --stop-file, " << stop_file
        << "] }\n"
        << more;
    return path;
  }
  // A job of one range table on 2 servers (checkpoints every 20 clocks)
  // under ps_launch, its worker 0 past clock 100: its files for 2 and 3
  // servers, the stop file, the launcher's output file and process.
  struct RangeJob {
    std::string job2, job3, stop_file, log;
    Subprocess* launch = nullptr;
    std::string Log() const { return ReadText(log); }
    bool WaitFor(const std::string& what) const { return WaitForText(log, what); }
    pid_t Pid(const std::string& name) const { return PidOf(log, name); }
  };
  // With `factor` 2, each shard has a backup (replication.factor 2).
  void StartRangeJobOnTwo(RangeJob* run, uint32_t factor = 1) {
    const std::string ckpt = (dir_ / "ckpt").string();
    run->stop_file = (dir_ / "stop").string();
    std::ofstream(run->stop_file) << "";
    const std::vector<int> ports = {FreePort(), FreePort(), FreePort()};
    std::string more;
    if (factor > 1) {
      const uint32_t offset = FreePortOffset(ports, factor);
      ASSERT_NE(offset, 0u);
      more = "replication: { factor: " + std::to_string(factor) +
             ", port_offset: " + std::to_string(offset) + " }\n";
    }
    run->job2 = ReshardJob(ports, 2, "job2", ckpt, run->stop_file, /*hashed=*/false, 20, more);
    run->job3 = ReshardJob(ports, 3, "job3", ckpt, run->stop_file, /*hashed=*/false, 20, more);
    run->log = (dir_ / "launch.log").string();
    run->launch = StartLaunchLogged(run->job2, run->log);
    ASSERT_NE(run->launch, nullptr);
    ASSERT_TRUE(WaitForText(run->log, "[worker 0] clock 100")) << ReadText(run->log);
  }
  // Defined below its tests.
  void ReshardReplicatedJob(const std::string& authority);
  void MoveTwoThreeOneTwo(bool hashed, bool in_memory, std::string* out, int64_t* stop);
  // ps_launch on `config` in the background, its output in the file `log`.
  Subprocess* StartLaunchLogged(const std::string& config, const std::string& log) {
    return Start({"/bin/sh", "-c", "exec " + kLaunch + " --config " + config + " > " + log + " 2>&1"});
  }
  // Both replica_pushers' last line in the launcher's output `out`: every
  // one of the 10000 rows and `ids` hashed ids holds the sum of 3 pushed
  // each clock up to `stop`; and the job succeeded.
  static void ExpectExactSums(const std::string& out, int ids, int64_t stop) {
    const std::string exact = "exact: every one of 10000 rows and " + std::to_string(ids) +
                              " hashed ids holds " + std::to_string(3 * stop) + ".0 after " +
                              std::to_string(stop) + " clocks";
    EXPECT_NE(out.find("[worker 0] " + exact), std::string::npos) << out;
    EXPECT_NE(out.find("[worker 1] " + exact), std::string::npos) << out;
    EXPECT_NE(out.find("job succeeded"), std::string::npos) << out;
  }
  // The pid of the process the launcher's output in the file at `log`
  // says it started as `name` ("started <name> (pid N)"); -1 when none.
  static pid_t PidOf(const std::string& log, const std::string& name) {
    const std::regex started("started " + name + R"( \(pid (\d+)\))");
    const std::string text = ReadText(log);
    std::smatch m;
    return std::regex_search(text, m, started) ? static_cast<pid_t>(std::stol(m[1])) : -1;
  }
  // The text of the file at `path` (empty while there is none).
  static std::string ReadText(const std::string& path) {
    std::ifstream in(path);
    std::string text, line;
    while (std::getline(in, line)) text += line + "\n";
    return text;
  }
  // Waits (at most 60 s) until the file at `log` holds `what`.
  static bool WaitForText(const std::string& log, const std::string& what) {
    const auto deadline = Steady::now() + std::chrono::seconds(60);
    while (ReadText(log).find(what) == std::string::npos && Steady::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(10));
    }
    return ReadText(log).find(what) != std::string::npos;
  }
  // The newest clock worker 0 reported in the file at `log` ("[worker 0]
  // clock N", every 100); -1 before the first.
  static int64_t NewestClock(const std::string& log) {
    static const std::regex line(R"(\[worker 0\] clock (\d+))");
    const std::string text = ReadText(log);
    int64_t newest = -1;
    for (std::sregex_iterator it(text.begin(), text.end(), line), end; it != end; ++it) {
      newest = std::max<int64_t>(newest, std::stoll((*it)[1]));
    }
    return newest;
  }
  // Waits (at most 60 s) until worker 0 reports a clock past `clock`.
  static bool WaitPastClock(const std::string& log, int64_t clock) {
    const auto deadline = Steady::now() + std::chrono::seconds(60);
    while (NewestClock(log) <= clock && Steady::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(50));
    }
    return NewestClock(log) > clock;
  }
  // ps_ctl reshard from job file `from` to `to`, expected to succeed (the
  // launch log at `log` shown if not); its output.
  std::string ReshardTo(const std::string& from, const std::string& to, const std::string& log,
                        bool through_generation = false) {
    std::vector<std::string> argv = {kCtl, "reshard", "--config", from, "--to", to};
    if (through_generation) argv.push_back("--through-generation");
    auto [status, out] = Finish(Start(argv, true), milliseconds(120000));
    EXPECT_TRUE(ExitedSuccessfully(status)) << out << "\n" << ReadText(log);
    return out;
  }
  // Runs ps_launch on job file `path` (with --resume) to its end; its output.
  std::string RunLaunch(const std::string& path, bool resume) {
    std::vector<std::string> argv = {kLaunch, "--config", path};
    if (resume) argv.push_back("--resume");
    auto [status, out] = Finish(Start(argv, true), std::chrono::milliseconds(120000));
    EXPECT_TRUE(ExitedSuccessfully(status)) << DescribeWaitStatus(status) << "\n" << out;
    return out;
  }

  Subprocess* Start(std::vector<std::string> argv, bool capture = false) {
    SubprocessOptions o;
    o.argv = std::move(argv);
    o.capture_output = capture;
    auto p = Subprocess::Spawn(o);
    EXPECT_OK(p);
    if (!p.ok()) return nullptr;
    procs_.push_back(std::move(*p));
    return procs_.back().get();
  }

  Subprocess* StartServer(const std::string& job, int shard) {
    return Start({kServer, "--config", job, "--shard", std::to_string(shard)});
  }

  // Reads a captured child's output until it exits or `timeout` passes
  // (then it is killed and the test fails). Returns {wait status, output}.
  std::pair<int, std::string> Finish(Subprocess* p, milliseconds timeout,
                                     const std::function<void(const std::string&)>& on_line = {}) {
    if (p == nullptr) return {-1, ""};  // Start failed, and said why
    std::string out;
    LineReader reader;
    std::vector<std::string> lines;
    const auto deadline = Steady::now() + timeout;
    bool eof = p->output_fd() < 0;
    while (!eof && Steady::now() < deadline) {
      pollfd pfd{p->output_fd(), POLLIN, 0};
      poll(&pfd, 1, 100);
      auto r = reader.ReadFrom(p->output_fd(), &lines);
      if (!r.ok()) break;
      eof = *r;
      for (auto& l : lines) {
        if (on_line) on_line(l);
        out += l + "\n";
      }
      lines.clear();
    }
    auto status = p->WaitFor(std::max(milliseconds(0), std::chrono::duration_cast<milliseconds>(
                                                          deadline - Steady::now())));
    if (!status.ok()) {
      ADD_FAILURE() << p->program() << " did not finish in time; output:\n" << out;
      return {p->Terminate(milliseconds(1000)), out};
    }
    return {*status, out};
  }

  fs::path dir_;
  std::vector<int> ports_;
  std::vector<std::unique_ptr<Subprocess>> procs_;
};

constexpr char kSumTables[] =
    "tables:\n"
    "  - { name: acc, rows: 10000, dim: 1, optimizer: { type: add } }\n"
    "  - { name: emb, rows: 1000000, dim: 8, optimizer: { type: add } }\n"
    "client: { request_timeout_ms: 10000 }\n";

TEST_F(E2eTest, FinalParametersEqualTheSumOfAllPushes) {
  const std::string path = WriteJob(2, 2, kSumTables);
  auto job = LoadJobFile(path);
  ASSERT_OK(job);
  Subprocess* servers[2] = {StartServer(path, 0), StartServer(path, 1)};

  // Each worker pushes integer-valued updates, up to 8 tickets in flight;
  // float sums of small integers are exact, so the result must match exactly.
  std::vector<double> expect_acc(10000, 0.0), expect_emb(1000000 * 8, 0.0);
  std::mutex mu;
  auto worker = [&](uint32_t rank) {
    auto client = Client::Create(*job, rank);
    ASSERT_OK(client);
    std::mt19937 gen(100 + rank);
    std::vector<double> acc(10000, 0.0);
    std::map<uint64_t, std::vector<double>> emb;
    std::deque<Ticket> in_flight;
    for (int step = 0; step < 150; ++step) {
      std::vector<float> dense(10000);
      for (size_t i = 0; i < dense.size(); ++i) {
        dense[i] = static_cast<float>(static_cast<int>(gen() % 7) - 3);
        acc[i] += dense[i];
      }
      auto t1 = (*client)->PushDense(0, SharedFloats::Take(std::move(dense)));
      ASSERT_OK(t1);
      in_flight.push_back(*t1);
      std::vector<uint64_t> rows(64);  // unsorted, may repeat, both shards
      std::vector<float> vals(64 * 8);
      for (size_t r = 0; r < rows.size(); ++r) {
        rows[r] = gen() % 1000000;
        auto& e = emb[rows[r]];
        e.resize(8);
        for (int c = 0; c < 8; ++c) {
          vals[r * 8 + c] = static_cast<float>(gen() % 5);
          e[c] += vals[r * 8 + c];
        }
      }
      auto t2 = (*client)->Push(1, rows, SharedFloats::Take(std::move(vals)));
      ASSERT_OK(t2);
      in_flight.push_back(*t2);
      while (in_flight.size() > 8) {
        ASSERT_OK((*client)->Wait(in_flight.front()));
        in_flight.pop_front();
      }
    }
    for (Ticket t : in_flight) ASSERT_OK((*client)->Wait(t));
    std::lock_guard<std::mutex> lock(mu);
    for (size_t i = 0; i < acc.size(); ++i) expect_acc[i] += acc[i];
    for (auto& [row, e] : emb) {
      for (int c = 0; c < 8; ++c) expect_emb[row * 8 + c] += e[c];
    }
  };
  std::thread w0(worker, 0), w1(worker, 1);
  w0.join();
  w1.join();

  auto reader = Client::Create(*job, 0);
  ASSERT_OK(reader);
  std::vector<float> acc(10000), emb(1000000 * 8);
  ASSERT_OK((*reader)->Wait(*(*reader)->PullDense(0, acc.data())));
  ASSERT_OK((*reader)->Wait(*(*reader)->PullDense(1, emb.data())));
  for (size_t i = 0; i < acc.size(); ++i) ASSERT_EQ(acc[i], expect_acc[i]) << "acc row " << i;
  size_t nonzero = 0;
  for (size_t i = 0; i < emb.size(); ++i) {
    ASSERT_EQ(emb[i], expect_emb[i]) << "emb element " << i;
    nonzero += emb[i] != 0;
  }
  EXPECT_GT(nonzero, 1000u);

  // ps_ctl reads every shard's counters, then shuts the job down cleanly.
  auto [st_status, st_out] = Finish(Start({kCtl, "status", "--config", path, "--raw"}, true), milliseconds(10000));
  EXPECT_TRUE(ExitedSuccessfully(st_status)) << st_out;
  EXPECT_NE(st_out.find("shard 0 endpoint tcp://127.0.0.1:" + std::to_string(ports_[0])),
            std::string::npos) << st_out;
  EXPECT_NE(st_out.find("shard 1 endpoint"), std::string::npos) << st_out;
  EXPECT_NE(st_out.find("pushes 600 pulls 2 errors 0"), std::string::npos) << st_out;
  auto [sd_status, sd_out] = Finish(Start({kCtl, "shutdown", "--config", path}, true), milliseconds(10000));
  EXPECT_TRUE(ExitedSuccessfully(sd_status)) << sd_out;
  for (Subprocess* s : servers) {
    auto st = s->WaitFor(milliseconds(5000));
    ASSERT_OK(st);
    EXPECT_TRUE(ExitedSuccessfully(*st)) << DescribeWaitStatus(*st);
  }
  // With the servers gone, ps_ctl names the one that does not answer.
  auto [gone_status, gone_out] = Finish(
      Start({kCtl, "status", "--config", path, "--raw", "--timeout-ms", "300"}, true), milliseconds(10000));
  EXPECT_TRUE(WIFEXITED(gone_status) && WEXITSTATUS(gone_status) == 1) << gone_out;
  EXPECT_NE(gone_out.find("DeadlineExceeded: STATS request"), std::string::npos) << gone_out;
  EXPECT_NE(gone_out.find("to server 0 at"), std::string::npos) << gone_out;
}

TEST_F(E2eTest, KilledServerThatStaysDownFailsNamingItWithinTheDownTimeout) {
  const std::string path = WriteJob(2, 1,
                                    "tables:\n  - { name: w, rows: 1000, dim: 4 }\n"
                                    "client: { request_timeout_ms: 1000 }\n"
                                    "liveness: { server_down_timeout_ms: 1500 }\n");
  auto job = LoadJobFile(path);
  ASSERT_OK(job);
  StartServer(path, 0);
  Subprocess* victim = StartServer(path, 1);
  auto client = Client::Create(*job, 0);
  ASSERT_OK(client);
  std::vector<float> w(4000), g(4000, 0.5f);
  // Servers may still be starting: the first pull waits for them (queued by
  // the transport), within the deadline.
  Status first = (*client)->Wait(*(*client)->PullDense(0, w.data()));
  for (int i = 0; i < 20 && !first.ok(); ++i) {
    first = (*client)->Wait(*(*client)->PullDense(0, w.data()));
  }
  ASSERT_OK(first);
  for (int i = 0; i < 20; ++i) {
    ASSERT_OK((*client)->Wait(*(*client)->PushDense(0, SharedFloats::Take(std::vector<float>(g)))));
  }
  ASSERT_OK(victim->Signal(SIGKILL));
  ASSERT_OK(victim->WaitFor(milliseconds(5000)));

  const auto start = Steady::now();
  Status s = (*client)->Wait(*(*client)->PullDense(0, w.data()));
  const auto took = Steady::now() - start;
  // The client saw the connection drop: the pull waits for the server to
  // come back, up to liveness.server_down_timeout_ms, then fails naming it.
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("server 1 at tcp://127.0.0.1:" + std::to_string(ports_[1])),
            std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("did not come back within 1500 ms"), std::string::npos)
      << s.ToString();
  EXPECT_GE(took, milliseconds(1000));
  EXPECT_LT(took, milliseconds(5000));  // the down timeout plus slack: no hang
  EXPECT_EQ((*client)->counters().disconnects, 1u);
  // The surviving shard still serves its own rows.
  std::vector<uint64_t> rows = {0, 1, 2};
  std::vector<float> out(12);
  EXPECT_OK((*client)->PullSync(0, rows, out.data()));
}

// replication.factor 2 with real processes: the primary of shard 0 is
// SIGKILLed with a push in flight, the test (standing in for ps_launch, the
// authority) promotes its backup, which takes over the shard's address; the
// worker's client reconnects and sends what was not acknowledged. Every row
// ends at exactly the sum of the pushes: none lost, none applied twice.
TEST_F(E2eTest, APromotedBackupLosesNoAcknowledgedPushAndAppliesNoneTwice) {
  std::string path = WriteJob(2, 1,
                              "tables:\n  - { name: w, rows: 2000, dim: 1, optimizer: { type: add } }\n"
                              "consistency: { mode: bsp }\n"
                              "server: { exit_when_workers_leave: false }\n"
                              "client: { request_timeout_ms: 10000 }\n"
                              "liveness: { server_down_timeout_ms: 10000 }\n");
  // Backups at the servers' ports + an offset whose ports are free.
  const uint32_t offset = FreePortOffset(ports_, 2);
  ASSERT_NE(offset, 0u);
  std::ofstream(path, std::ios::app) << "replication: { factor: 2, port_offset: " << offset
                                     << " }\n";
  auto job = LoadJobFile(path);
  ASSERT_OK(job);
  Start({kServer, "--config", path, "--shard", "0", "--replica", "1"});
  Start({kServer, "--config", path, "--shard", "1", "--replica", "1"});
  Subprocess* primary0 = StartServer(path, 0);
  StartServer(path, 1);
  auto client = Client::Create(*job, 0);
  ASSERT_OK(client);
  ASSERT_OK((*client)->Join());
  float expected = 0;
  constexpr int kClocks = 30;
  for (int c = 0; c < kClocks; ++c) {
    const auto value = static_cast<float>(c + 1);
    auto push = (*client)->PushDense(0, SharedFloats::Take(std::vector<float>(2000, value)));
    ASSERT_OK(push);
    expected += value;
    if (c == 12) {
      // Killed with the push on its way, acknowledged or not.
      ASSERT_OK(primary0->Signal(SIGKILL));
      ASSERT_OK(primary0->WaitFor(milliseconds(5000)));
      auto where = ReplicaAddress(*job, 0, 1);
      ASSERT_OK(where);
      auto authority = ControlClient::Create(
          *job, {ConnectEndpoint(*where), "tcp://" + job->cluster.servers[1]});
      ASSERT_OK(authority);
      ASSERT_OK((*authority)->Membership(0, kMembershipPromote, 0, 1));
    }
    ASSERT_OK((*client)->Wait(*push)) << "clock " << c;
    auto clock = (*client)->Clock();
    ASSERT_OK(clock);
    ASSERT_OK((*client)->Wait(*clock));
  }
  std::vector<float> w(2000, -1.0f);
  ASSERT_OK((*client)->Wait(*(*client)->PullDense(0, w.data())));
  EXPECT_EQ(w, std::vector<float>(2000, expected));
  EXPECT_GE((*client)->counters().reconnects, 1u);
  // Shard 1 kept its backup, and the promoted shard 0 serves with none.
  auto stats = (*client)->Stats(1);
  ASSERT_OK(stats);
  EXPECT_NE(stats->find("replication factor 2 epoch 0"), std::string::npos) << *stats;
  stats = (*client)->Stats(0);
  ASSERT_OK(stats);
  EXPECT_EQ(stats->find("replication factor"), std::string::npos) << *stats;
  EXPECT_NE(stats->find("lost_clocks 0"), std::string::npos) << *stats;
}

// A shard killed with SIGKILL and started again (as ps_launch does) comes
// back from its newest checkpoint; the worker's client sends its unanswered
// requests again and its clock, and goes on without restarting.
TEST_F(E2eTest, KilledServerRestartedFromItsCheckpointServesTheWorkerAgain) {
  const std::string ckpt = (dir_ / "ckpt").string();
  const std::string path = WriteJob(
      2, 1,
      "tables:\n  - { name: acc, rows: 1000, dim: 1, optimizer: { type: add } }\n"
      "consistency: { mode: bsp }\n"
      "client: { request_timeout_ms: 3000 }\n"
      "liveness: { timeout_ms: 2000, server_down_timeout_ms: 30000 }\n"
      "checkpoint: { dir: " + ckpt + ", every_clocks: 5, sync: false }\n");
  auto job = LoadJobFile(path);
  ASSERT_OK(job);
  StartServer(path, 0);
  Subprocess* victim = StartServer(path, 1);
  auto client = Client::Create(*job, 0);
  ASSERT_OK(client);
  Client& c = **client;
  ASSERT_OK(c.Join());
  const std::vector<float> ones(1000, 1.0f);
  std::vector<float> w(1000);
  // Clocks 0..12: every row gets 1 per clock; gen-10 holds 10 per row.
  for (int clock = 0; clock < 13; ++clock) {
    ASSERT_OK(c.Wait(*c.PushDense(0, SharedFloats::Take(std::vector<float>(ones)))));
    ASSERT_OK(c.Wait(*c.Clock()));
  }
  const auto gen10 = fs::path(ShardCheckpointDir(ckpt, 1)) / "gen-10";
  for (int i = 0; i < 100 && !fs::exists(gen10); ++i) std::this_thread::sleep_for(milliseconds(50));
  ASSERT_TRUE(fs::exists(gen10));
  ASSERT_OK(victim->Signal(SIGKILL));
  ASSERT_OK(victim->WaitFor(milliseconds(5000)));

  // Clock 13 while shard 1 is down: the requests wait for it.
  auto push = c.PushDense(0, SharedFloats::Take(std::vector<float>(ones)));
  auto clock = c.Clock();
  auto pull = c.PullDense(0, w.data());
  ASSERT_TRUE(push.ok() && clock.ok() && pull.ok());
  ASSERT_OK(c.Poll(300));
  EXPECT_EQ(c.counters().disconnects, 1u);
  Subprocess* restarted = Start({kServer, "--config", path, "--shard", "1"}, /*capture=*/true);
  EXPECT_OK(c.Wait(*push));
  EXPECT_OK(c.Wait(*clock));
  Status pulled = c.Wait(*pull);
  ASSERT_OK(pulled);
  EXPECT_EQ(c.counters().reconnects, 1u);
  // Shard 0 kept everything; shard 1 restored clock 10 and got clock 13's
  // push exactly once (it may have arrived twice): the updates of clocks
  // 10..12 on shard 1 are what the crash cost.
  const RowRange r1 = ShardRows(1000, 2, 1);
  for (uint64_t row = 0; row < 1000; ++row) {
    const float want = r1.Contains(row) ? 11.0f : 14.0f;
    ASSERT_EQ(w[row], want) << "row " << row;
  }
  auto stats = c.Stats(1);
  ASSERT_OK(stats);
  EXPECT_NE(stats->find("recovery started_clock 10 lost_clocks 3"), std::string::npos) << *stats;
  EXPECT_NE(stats->find("worker_clocks 14"), std::string::npos) << *stats;
  // Training goes on.
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK(c.Wait(*c.PushDense(0, SharedFloats::Take(std::vector<float>(ones)))));
    ASSERT_OK(c.Wait(*c.Clock()));
  }
  ASSERT_OK(c.Wait(*c.PullDense(0, w.data())));
  EXPECT_EQ(w[r1.begin], 14.0f);
  ASSERT_OK(c.ShutdownServers());
  auto [status, out] = Finish(restarted, milliseconds(10000));
  EXPECT_TRUE(ExitedSuccessfully(status)) << out;
  EXPECT_NE(out.find("restored " + ckpt + "/shard-1/gen-10"), std::string::npos) << out;
  EXPECT_NE(out.find("worker 0 is at clock 13 and this shard started at clock 10"),
            std::string::npos) << out;
}

constexpr char kTrainJob[] =
    "tables:\n"
    "  - { name: weights, rows: 32, dim: 1, optimizer: { type: sgd, lr: 0.1 } }\n"
    "consistency: { mode: bsp }\n"
    "train: { table: weights, features: 32, samples_per_worker: 2048, batch_size: 32,\n"
    "         iterations: ITER, log_every: 20 }\n";

std::string TrainJob(int iterations) {
  std::string s = kTrainJob;
  return s.replace(s.find("ITER"), 4, std::to_string(iterations));
}

TEST_F(E2eTest, LaunchTrainsLinearRegressionAndTheLossGoesDown) {
  const std::string path = WriteJob(2, 2, TrainJob(150));
  Subprocess* launch = Start({kLaunch, "--config", path}, /*capture=*/true);
  ASSERT_NE(launch, nullptr);
  auto [status, out] = Finish(launch, milliseconds(60000));
  EXPECT_TRUE(ExitedSuccessfully(status)) << DescribeWaitStatus(status) << "\n" << out;
  EXPECT_NE(out.find("[server 0]"), std::string::npos) << out;
  EXPECT_NE(out.find("[server 1]"), std::string::npos) << out;
  // Whichever worker starts first sees the untrained weights; every worker
  // ends near the noise floor with the generating weights recovered.
  std::regex done(R"(\[worker (\d)\].*first loss ([0-9.]+), final loss ([0-9.]+), \|w - w\*\|/\|w\*\| = ([0-9.]+))");
  double first_max = 0;
  std::vector<double> finals;
  int finished = 0;
  for (std::sregex_iterator it(out.begin(), out.end(), done), end; it != end; ++it) {
    first_max = std::max(first_max, std::stod((*it)[2]));
    finals.push_back(std::stod((*it)[3]));
    EXPECT_LT(std::stod((*it)[4]), 0.05) << it->str();
    ++finished;
  }
  for (double f : finals) EXPECT_LT(f, first_max * 0.01) << out;
  EXPECT_EQ(finished, 2) << out;
}

TEST_F(E2eTest, LaunchTrainsAnMlpOnFashionMnist) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  const std::string path = WriteJob(
      2, 2,
      "tables: [ { name: mlp, rows: 79510, init: { type: uniform, scale: 0.05 },\n"
      "            optimizer: { type: sgd, lr: 0.02, momentum: 0.9 } } ]\n"
      "consistency: { mode: ssp, staleness: 2 }\n"
      "train: { program: mlp, table: mlp, layers: [784, 100, 10], batch_size: 64,\n"
      "         iterations: 400, log_every: 100 }\n");
  Subprocess* launch = Start({kLaunch, "--config", path}, true);
  auto [status, out] = Finish(launch, milliseconds(120000));
  EXPECT_TRUE(ExitedSuccessfully(status)) << DescribeWaitStatus(status) << "\n" << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(worker 0: done: .* test accuracy ([0-9.]+))")))
      << out;
  EXPECT_GT(std::stod(m[1]), 0.75) << out;  // under one epoch per worker
}

// The mean of the last evaluations worker 0 printed in its "done" line.
double TailMetric(const std::string& out, const std::string& metric) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex("worker 0: done: .* " + metric +
                                            R"( [0-9.]+ \(mean of the last \d+: ([0-9.]+)\))"))) {
    ADD_FAILURE() << "no final " << metric << " in:\n" << out;
    return -1;
  }
  return std::stod(m[1]);
}

// Trains `job` with ps_launch (its workers writing metrics.csv), then the
// same job with ps_worker --standalone; returns both tail metrics.
TEST_F(E2eTest, SparseLogisticRegressionMatchesTheSingleProcessRun) {
  const std::string job = WriteJob(
      2, 2,
      "tables: [ { name: weights, rows: 200000,\n"
      "            optimizer: { type: adagrad, lr: 0.05, l2: 0.0001 } } ]\n"
      "consistency: { mode: ssp, staleness: 3 }\n"
      "train: { program: sparse_logistic_regression, samples_per_worker: 20000,\n"
      "         test_samples: 5000, batch_size: 200, iterations: 300, eval_every: 100,\n"
      "         log_every: 100, metrics_csv: " + (dir_ / "metrics.csv").string() + " }\n");
  Subprocess* launch = Start({kLaunch, "--config", job}, true);
  auto [status, out] = Finish(launch, milliseconds(120000));
  ASSERT_TRUE(ExitedSuccessfully(status)) << DescribeWaitStatus(status) << "\n" << out;
  const double distributed = TailMetric(out, "test log-loss");
  // Every worker wrote its progress rows; worker 0 also its evaluations.
  std::ifstream csv(dir_ / "metrics.csv");
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line, MetricsCsv::kHeader);
  int rows[2] = {0, 0}, evaluations = 0;
  while (std::getline(csv, line)) {
    std::vector<std::string> cells;
    std::stringstream fields(line);
    for (std::string cell; std::getline(fields, cell, ',');) cells.push_back(cell);
    ASSERT_GE(cells.size(), 6u) << line;
    ++rows[std::stoi(cells[2])];
    if (cells[5] == "test log-loss") ++evaluations;
  }
  EXPECT_EQ(rows[0], 3);
  EXPECT_EQ(rows[1], 3);
  EXPECT_EQ(evaluations, 3);

  Subprocess* alone = Start({kWorker, "--config", job, "--standalone"}, true);
  auto [alone_status, alone_out] = Finish(alone, milliseconds(120000));
  ASSERT_TRUE(ExitedSuccessfully(alone_status)) << alone_out;
  const double sequential = TailMetric(alone_out, "test log-loss");
  EXPECT_NE(alone_out.find("600 steps over all the data"), std::string::npos) << alone_out;
  // Well below log 2 (no model), and as good as one process within 2%.
  EXPECT_LT(sequential, 0.65) << alone_out;
  EXPECT_LT(distributed, sequential * 1.02) << out << alone_out;
}

// The same model under FTRL-Proximal (type ftrl): the job file's keys
// reach every shard, and the shards' z and n train it as one process does.
TEST_F(E2eTest, SparseLogisticRegressionUnderFtrlMatchesTheSingleProcessRun) {
  const std::string job = WriteJob(
      2, 2,
      "tables: [ { name: weights, rows: 200000,\n"
      "            optimizer: { type: ftrl, alpha: 0.5, beta: 1, l1: 0.1, l2: 0.01 } } ]\n"
      "consistency: { mode: ssp, staleness: 3 }\n"
      "train: { program: sparse_logistic_regression, samples_per_worker: 20000,\n"
      "         test_samples: 5000, batch_size: 200, iterations: 300, eval_every: 100,\n"
      "         log_every: 100 }\n");
  Subprocess* launch = Start({kLaunch, "--config", job}, true);
  auto [status, out] = Finish(launch, milliseconds(120000));
  ASSERT_TRUE(ExitedSuccessfully(status)) << DescribeWaitStatus(status) << "\n" << out;
  const double distributed = TailMetric(out, "test log-loss");
  Subprocess* alone = Start({kWorker, "--config", job, "--standalone"}, true);
  auto [alone_status, alone_out] = Finish(alone, milliseconds(120000));
  ASSERT_TRUE(ExitedSuccessfully(alone_status)) << alone_out;
  const double sequential = TailMetric(alone_out, "test log-loss");
  EXPECT_LT(sequential, 0.6) << alone_out;
  EXPECT_LT(distributed, sequential * 1.02) << out << alone_out;
}

// The ctr program: embeddings in a hashed table (made on first touch,
// evicted beyond 3,000 rows a shard) and an MLP in a dense table, trained by
// two workers on two shards under bsp, reach the AUC of one process
// training the same job, and learn the planted teacher (well above the 0.5
// of no model). Field 1 is a bag of 1 to 4 values a sample, its input the
// sum of their embeddings.
TEST_F(E2eTest, CtrWithHashedEmbeddingsMatchesTheSingleProcessRun) {
  // 4 fields x dim 4 + 2 dense = 18 inputs, hidden [16]: 18*16+16 + 16+1.
  // A bag sums its values' embeddings into its field's 4 inputs.
  const std::string job = WriteJob(
      2, 2,
      "tables:\n"
      "  - { name: emb, keys: hashed, dim: 4, max_rows: 3000, evict: { policy: lru },\n"
      "      init: { type: normal, stddev: 0.01 }, optimizer: { type: adagrad, lr: 0.1 } }\n"
      "  - { name: mlp, rows: 321, init: { type: uniform, scale: 0.1 },\n"
      "      optimizer: { type: adagrad, lr: 0.02 } }\n"
      "consistency: { mode: bsp }\n"
      "train: { program: ctr, table: mlp, samples_per_worker: 40000, test_samples: 5000,\n"
      "         batch_size: 128, iterations: 300, eval_every: 100, log_every: 100,\n"
      "         ctr: { embedding_table: emb, fields: 4, dense: 2, vocabulary: 2000,\n"
      "                hidden: [16], bags: [{ field: 1, max_values: 4 }] } }\n");
  Subprocess* launch = Start({kLaunch, "--config", job}, true);
  auto [status, out] = Finish(launch, milliseconds(120000));
  ASSERT_TRUE(ExitedSuccessfully(status)) << DescribeWaitStatus(status) << "\n" << out;
  const double distributed = TailMetric(out, "test AUC");
  EXPECT_NE(out.find("at the planted teacher's probabilities"), std::string::npos) << out;
  EXPECT_NE(out.find("ctr: 4 fields, 1 of them bags"), std::string::npos) << out;
  Subprocess* alone = Start({kWorker, "--config", job, "--standalone"}, true);
  auto [alone_status, alone_out] = Finish(alone, milliseconds(120000));
  ASSERT_TRUE(ExitedSuccessfully(alone_status)) << alone_out;
  const double sequential = TailMetric(alone_out, "test AUC");
  std::printf("test AUC: 2 workers %.4f, one process %.4f\n", distributed, sequential);
  EXPECT_GT(sequential, 0.7) << alone_out;
  EXPECT_NEAR(distributed, sequential, 0.01) << out << alone_out;
}

// A file in the Criteo format (label, 13 integers, 26 hex categories, some
// empty) trains through ps_launch: the click depends on C1 and on I1, so a
// model that reads both columns reaches a high AUC on the test file. C2 is
// a bag field of 1 to 3 values a line (train.ctr.bags). Worker 1 is slowed
// and stragglers.balance moves samples of its block to worker 0's
// minibatches (gathered from both workers' lines).
TEST_F(E2eTest, CtrTrainsOnCriteoFiles) {
  std::mt19937_64 rng(3);
  auto write = [&](const std::string& name, int lines) {
    std::ofstream out(dir_ / name);
    for (int i = 0; i < lines; ++i) {
      const uint32_t c1 = static_cast<uint32_t>(rng() % 50) * 0x01000193u;
      const int i1 = static_cast<int>(rng() % 20);
      const bool likely = (c1 / 0x01000193u) % 2 == 0 && i1 > 5;
      const int label = (rng() % 100) < (likely ? 80u : 15u) ? 1 : 0;
      out << label << '\t' << i1;
      for (int d = 1; d < 13; ++d) out << '\t' << (d % 3 == 0 ? "" : std::to_string(rng() % 7));
      char hex[16];
      std::snprintf(hex, sizeof hex, "%08x", c1);
      out << '\t' << hex;
      for (int f = 1; f < 26; ++f) {
        std::snprintf(hex, sizeof hex, "%08x", static_cast<uint32_t>(rng() % 30));
        out << '\t' << (f % 5 == 0 ? "" : hex);
        for (uint64_t more = f == 1 ? rng() % 3 : 0; more > 0; --more) {
          std::snprintf(hex, sizeof hex, "%x", static_cast<uint32_t>(rng() % 30));
          out << ',' << hex;
        }
      }
      out << '\n';
    }
  };
  write("train.tsv", 8000);
  write("test.tsv", 2000);
  // 26 fields x dim 2 + 13 = 65 inputs, hidden [8]: 65*8+8 + 8+1.
  const std::string job = WriteJob(
      1, 2,
      "tables:\n"
      "  - { name: emb, keys: hashed, dim: 2, max_rows: 100000,\n"
      "      init: { type: normal, stddev: 0.01 }, optimizer: { type: adagrad, lr: 0.1 } }\n"
      "  - { name: mlp, rows: 537, init: { type: uniform, scale: 0.1 },\n"
      "      optimizer: { type: adagrad, lr: 0.02 } }\n"
      "consistency: { mode: ssp, staleness: 2 }\n"
      "stragglers: { slow_worker: 1, slow_factor: 3, step_ms: 2, balance: true,\n"
      "              balance_window: 10 }\n"
      "train: { program: ctr, table: mlp, test_samples: 2000, batch_size: 100,\n"
      "         iterations: 200, eval_every: 100, log_every: 100,\n"
      "         ctr: { embedding_table: emb, hidden: [8], bags: [{ field: 1, max_values: 3 }],\n"
      "                criteo_train: " + (dir_ / "train.tsv").string() + ",\n"
      "                criteo_test: " + (dir_ / "test.tsv").string() + " } }\n");
  Subprocess* launch = Start({kLaunch, "--config", job}, true);
  auto [status, out] = Finish(launch, milliseconds(120000));
  ASSERT_TRUE(ExitedSuccessfully(status)) << DescribeWaitStatus(status) << "\n" << out;
  EXPECT_NE(out.find("4000 training samples from " + (dir_ / "train.tsv").string()),
            std::string::npos) << out;
  EXPECT_NE(out.find("26 fields, 1 of them bags"), std::string::npos) << out;
  EXPECT_GT(TailMetric(out, "test AUC"), 0.75) << out;
  EXPECT_NE(out.find("balance at clock"), std::string::npos) << out;
}

TEST_F(E2eTest, MatrixFactorizationMatchesTheSingleProcessRunUnderBsp) {
  const std::string job = WriteJob(
      2, 2,
      "tables:\n"
      "  - { name: users, rows: 1000, dim: 4, init: { type: normal, stddev: 0.1, seed: 3 },\n"
      "      optimizer: { type: sgd, lr: 8 } }\n"
      "  - { name: items, rows: 500, dim: 4, init: { type: normal, stddev: 0.1, seed: 4 },\n"
      "      optimizer: { type: sgd, lr: 8 } }\n"
      "consistency: { mode: bsp }\n"
      "train: { program: matrix_factorization, observe_probability: 0.1, noise: 0.1,\n"
      "         batch_size: 100, iterations: 4500, eval_every: 500, log_every: 1500 }\n");
  Subprocess* launch = Start({kLaunch, "--config", job}, true);
  auto [status, out] = Finish(launch, milliseconds(120000));
  ASSERT_TRUE(ExitedSuccessfully(status)) << DescribeWaitStatus(status) << "\n" << out;
  const double distributed = TailMetric(out, "test RMSE");
  Subprocess* alone = Start({kWorker, "--config", job, "--standalone"}, true);
  auto [alone_status, alone_out] = Finish(alone, milliseconds(120000));
  ASSERT_TRUE(ExitedSuccessfully(alone_status)) << alone_out;
  const double sequential = TailMetric(alone_out, "test RMSE");
  // Near the noise level (0.1; predicting 0 scores about 0.5) and within 5%
  // of one process.
  EXPECT_LT(sequential, 0.15) << alone_out;
  EXPECT_LT(distributed, sequential * 1.05) << out << alone_out;
}

TEST_F(E2eTest, ARestartedJobResumesFromTheNewestCheckpointEveryShardHas) {
  const std::string ckpt = (dir_ / "ckpt").string();
  auto job = [&](int iterations) {
    return WriteJob(2, 2, TrainJob(iterations) + "checkpoint: { dir: " + ckpt +
                              ", every_clocks: 20, sync: false }\n");
  };
  {
    Subprocess* launch = Start({kLaunch, "--config", job(50)}, true);
    auto [status, out] = Finish(launch, milliseconds(60000));
    ASSERT_TRUE(ExitedSuccessfully(status)) << DescribeWaitStatus(status) << "\n" << out;
    EXPECT_NE(out.find("checkpoint of clock 40 written"), std::string::npos) << out;
  }
  // Shard 1 lost its newest generation (say it crashed while writing it):
  // the job resumes from clock 20, which both shards hold.
  fs::remove_all(fs::path(ShardCheckpointDir(ckpt, 1)) / "gen-40");
  Subprocess* launch = Start({kLaunch, "--config", job(100), "--resume"}, true);
  auto [status, out] = Finish(launch, milliseconds(60000));
  ASSERT_TRUE(ExitedSuccessfully(status)) << DescribeWaitStatus(status) << "\n" << out;
  EXPECT_NE(out.find("every shard restores clock 20"), std::string::npos) << out;
  EXPECT_NE(out.find("restored " + ckpt + "/shard-0/gen-20"), std::string::npos) << out;
  EXPECT_NE(out.find("restored " + ckpt + "/shard-1/gen-20"), std::string::npos) << out;
  EXPECT_NE(out.find("worker 0: joins at clock 20"), std::string::npos) << out;
  EXPECT_NE(out.find("worker 1: resumes at step 20"), std::string::npos) << out;

  // No clock common to every shard: the launcher refuses before starting anything.
  for (const char* gen : {"gen-20", "gen-40", "gen-60", "gen-80", "gen-100"}) {
    fs::remove_all(fs::path(ShardCheckpointDir(ckpt, 0)) / gen);
  }
  fs::create_directories(ShardCheckpointDir(ckpt, 0));
  auto dir = CheckpointDir::Open(ShardCheckpointDir(ckpt, 1)).value();
  ASSERT_FALSE(dir->Generations().value().empty());
  Subprocess* refused = Start({kLaunch, "--config", job(100)}, true);
  auto [refused_status, refused_out] = Finish(refused, milliseconds(30000));
  EXPECT_FALSE(ExitedSuccessfully(refused_status)) << refused_out;
  EXPECT_NE(refused_out.find("no checkpoint clock is held by every shard"), std::string::npos)
      << refused_out;
  EXPECT_NE(refused_out.find("shard 0: none"), std::string::npos) << refused_out;
}

// The README's recovery command: a job checkpointed on 2 servers resumes on
// 3 with `ps_launch --config job3.yaml --resume` (each new server reads its
// rows of the 2 shards' generation), trains on, and then on 2 again from
// the 3 servers' generation. The workers (replica_pusher) push integers to
// a range table and to 5000 ids of a hashed one under bsp: each run ends
// with every row and id holding the exact sum of every push since clock 0.
TEST_F(E2eTest, AJobCheckpointedOnTwoServersResumesOnThreeAndBackWithExactSums) {
  const std::string ckpt = (dir_ / "ckpt").string();
  // A job of `servers` servers whose workers stop at the clock in `stop`.
  const auto job = [&](int servers, const std::string& name, int64_t stop) {
    return PusherJob(servers, name, stop, "{ dir: " + ckpt + ", every_clocks: 20, sync: false }");
  };
  const std::string job2 = job(2, "job2", 60);
  const std::string first = RunLaunch(job2, false);
  EXPECT_NE(first.find("[worker 0] exact: every one of 10000 rows and 5000 hashed ids holds "
                       "180.0 after 60 clocks"),
            std::string::npos)
      << first;
  // The generations of the 2 servers, each with its shards-2 file.
  EXPECT_TRUE(fs::exists(fs::path(ShardCheckpointDir(ckpt, 1)) / "gen-60" / "shards-2")) << first;
  EXPECT_FALSE(fs::exists(ShardCheckpointDir(ckpt, 2)));

  const std::string job3 = job(3, "job3", 100);
  const std::string second = RunLaunch(job3, true);
  EXPECT_NE(second.find("checkpoint: every shard restores clock 60 from " + ckpt +
                        ", written by 2 shards: each of the 3 servers reads its rows of theirs"),
            std::string::npos)
      << second;
  for (int s = 0; s < 3; ++s) {
    EXPECT_NE(second.find("shard " + std::to_string(s) + ": restored " + ckpt +
                          "/shard-{0..1}/gen-60 (2 tables)"),
              std::string::npos)
        << second;
  }
  EXPECT_NE(second.find("[worker 1] exact: every one of 10000 rows and 5000 hashed ids holds "
                        "300.0 after 100 clocks"),
            std::string::npos)
      << second;
  EXPECT_TRUE(fs::exists(fs::path(ShardCheckpointDir(ckpt, 2)) / "gen-100" / "shards-3"))
      << second;

  // And back on 2 servers, from the 3 servers' generation.
  const std::string again = RunLaunch(job(2, "job2b", 120), true);
  EXPECT_NE(again.find("checkpoint: every shard restores clock 100 from " + ckpt +
                       ", written by 3 shards"),
            std::string::npos)
      << again;
  EXPECT_NE(again.find("[worker 0] exact: every one of 10000 rows and 5000 hashed ids holds "
                       "360.0 after 120 clocks"),
            std::string::npos)
      << again;
}

// ps_ctl reshard while the job trains: 2 servers -> 3 -> 1 -> 2 under bsp,
// the rows moved in memory or (--through-generation) through the handover
// generation. The workers (replica_pusher) pull a range table (and, with
// `hashed`, 5000 ids of a hashed one) every clock, check that they hold
// the sum of the clocks before, and push integers to them; after each move
// the workers send what was moved to the next servers. At the end every
// row and id holds the exact sum of every push since clock 0: none lost,
// none applied twice. `out`: the launcher's output once the job stopped at
// clock `stop`.
void E2eTest::MoveTwoThreeOneTwo(bool hashed, bool in_memory, std::string* out, int64_t* stop) {
  const std::string ckpt = (dir_ / "ckpt").string();
  const std::string stop_file = (dir_ / "stop").string();
  std::ofstream(stop_file) << "";  // no stop clock yet: the workers train on
  const std::vector<int> ports = {FreePort(), FreePort(), FreePort()};
  const auto job = [&](int servers, const std::string& name) {
    return ReshardJob(ports, servers, name, ckpt, stop_file, hashed, 50);
  };
  const std::string job1 = job(1, "job1"), job2 = job(2, "job2"), job3 = job(3, "job3");
  const std::string log = (dir_ / "launch.log").string();
  Subprocess* launch = StartLaunchLogged(job2, log);
  ASSERT_NE(launch, nullptr);
  const auto read_log = [&] { return ReadText(log); };
  const auto newest_clock = [&] { return NewestClock(log); };
  const auto wait_past = [&](int64_t clock) { return WaitPastClock(log, clock); };
  ASSERT_TRUE(wait_past(0)) << read_log();
  const std::string grown = ReshardTo(job2, job3, log, !in_memory);
  EXPECT_NE(grown.find("the job runs on 3 servers at map 1 from clock"), std::string::npos)
      << grown;
  EXPECT_EQ(grown.find("the 3 servers of the next map follow the old servers' rows in memory") !=
                std::string::npos,
            in_memory)
      << grown;
  ASSERT_TRUE(wait_past(newest_clock() + 100)) << read_log();
  const std::string shrunk = ReshardTo(job3, job1, log, !in_memory);
  EXPECT_NE(shrunk.find("the job runs on 1 server at map 2 from clock"), std::string::npos)
      << shrunk;
  ASSERT_TRUE(wait_past(newest_clock() + 100)) << read_log();
  const std::string back = ReshardTo(job1, job2, log, !in_memory);
  EXPECT_NE(back.find("the job runs on 2 servers at map 3 from clock"), std::string::npos)
      << back;
  ASSERT_TRUE(wait_past(newest_clock() + 100)) << read_log();
  *stop = newest_clock() + 300;
  std::ofstream(stop_file) << *stop << "\n";
  ASSERT_OK(launch->WaitFor(milliseconds(120000)));
  *out = read_log();
  ExpectExactSums(*out, hashed ? 5000 : 0, *stop);
}

// Through the handover generation: the next map's servers start once the
// old ones handed over, each restoring its rows of it.
TEST_F(E2eTest, ARunningJobGrowsFromTwoServersToThreeShrinksToOneAndGrowsBackWithExactSums) {
  std::string out;
  int64_t stop = 0;
  ASSERT_NO_FATAL_FAILURE(MoveTwoThreeOneTwo(/*hashed=*/true, /*in_memory=*/false, &out, &stop));
  EXPECT_NE(out.find("shard map 1: started 3 servers in place of 2"), std::string::npos) << out;
  EXPECT_NE(out.find("shard map 2: started 1 server in place of 3"), std::string::npos) << out;
  EXPECT_NE(out.find("shard map 3: started 2 servers in place of 1"), std::string::npos) << out;
  EXPECT_NE(out.find("handed over at clock"), std::string::npos) << out;
}

// In memory (replication.factor 1): ps_ctl reshard plans the move before
// it picks the handover clock, ps_launch starts the next map's servers at
// once, each follows the old servers whose rows (and hash slots) overlap
// its own (a copy, then every change: server/reshard_follower.h), and at
// the handover each serves what it holds; the old servers write the
// handover generation after.
TEST_F(E2eTest, ARunningJobMovesItsRowsInMemoryOntoThreeServersOneAndTwoWithExactSums) {
  std::string out;
  int64_t stop = 0;
  ASSERT_NO_FATAL_FAILURE(MoveTwoThreeOneTwo(/*hashed=*/true, /*in_memory=*/true, &out, &stop));
  EXPECT_NE(out.find("shard map 1: 3 of its 3 servers took their rows over in memory"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("shard map 2: 1 of its 1 servers took their rows over in memory"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("shard map 3: 2 of its 2 servers took their rows over in memory"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("servers of the next map that followed its rows"), std::string::npos) << out;
  EXPECT_EQ(out.find("restores the handover generation instead"), std::string::npos) << out;
}

// ps_ctl reshard of a replicated job (replication.factor 2): 2 servers ->
// 3 -> 2, each shard with a backup. Each old primary hands over and its
// backup exits with it; the workers find each new shard's replicas from
// the map a moved reply names. A primary of the 3-server map killed while
// the job trains is replaced by its backup (nothing lost), and the next
// reshard moves the job on from the promoted one. At the end every row
// holds the exact sum of every push since clock 0. `authority` is the
// replication section's authority settings: under the launcher's every
// replica of the next map follows the old primaries in memory (ps_launch
// starts them as soon as ps_ctl planned the move) and serves at the
// handover, the backups in sync from their first entry, so the killed
// primary's backup is one that followed, and the second move follows the
// promoted primary; under etcd's the rows move through the handover
// generation, every replica of the next map started (backups first) once
// the old ones freed their ports.
void E2eTest::ReshardReplicatedJob(const std::string& authority) {
  const std::string ckpt = (dir_ / "ckpt").string();
  const std::string stop_file = (dir_ / "stop").string();
  std::ofstream(stop_file) << "";
  const std::vector<int> ports = {FreePort(), FreePort(), FreePort()};
  const uint32_t offset = FreePortOffset(ports, 2);
  ASSERT_NE(offset, 0u);
  const std::string replicated = "replication: { factor: 2, port_offset: " +
                                 std::to_string(offset) + authority + " }\n" +
                                 "liveness: { server_down_timeout_ms: 20000 }\n";
  const auto job = [&](int servers, const std::string& name) {
    return ReshardJob(ports, servers, name, ckpt, stop_file, /*hashed=*/true, 50, replicated);
  };
  const std::string job2 = job(2, "job2"), job3 = job(3, "job3");
  const std::string log = (dir_ / "launch.log").string();
  Subprocess* launch = StartLaunchLogged(job2, log);
  ASSERT_NE(launch, nullptr);
  const auto read_log = [&] { return ReadText(log); };
  const auto newest_clock = [&] { return NewestClock(log); };
  const auto wait_past = [&](int64_t clock) { return WaitPastClock(log, clock); };
  const auto reshard = [&](const std::string& from, const std::string& to) {
    return ReshardTo(from, to, log);
  };
  ASSERT_TRUE(wait_past(0)) << read_log();
  const bool in_memory = authority.empty();
  const std::string grown = reshard(job2, job3);
  EXPECT_NE(grown.find("the job runs on 3 servers at map 1 from clock"), std::string::npos)
      << grown;
  EXPECT_EQ(grown.find("the 3 servers of the next map and their backups follow the old "
                       "servers' rows in memory") != std::string::npos,
            in_memory)
      << grown;
  ASSERT_TRUE(wait_past(newest_clock() + 100)) << read_log();
  {
    // Shard 1's primary of map 1 dies: its backup serves.
    static const std::regex started(R"(started server 1 of shard map 1 \(pid (\d+)\))");
    const std::string text = read_log();
    std::smatch m;
    ASSERT_TRUE(std::regex_search(text, m, started)) << text;
    ASSERT_EQ(kill(static_cast<pid_t>(std::stol(m[1])), SIGKILL), 0);
  }
  WaitForText(log, "serves as the primary");
  ASSERT_TRUE(wait_past(newest_clock() + 100)) << read_log();
  const std::string shrunk = reshard(job3, job2);
  EXPECT_NE(shrunk.find("the job runs on 2 servers at map 2 from clock"), std::string::npos)
      << shrunk;
  ASSERT_TRUE(wait_past(newest_clock() + 100)) << read_log();
  const int64_t stop = newest_clock() + 300;
  std::ofstream(stop_file) << stop << "\n";
  ASSERT_OK(launch->WaitFor(milliseconds(120000)));
  const std::string out = read_log();
  if (in_memory) {
    EXPECT_NE(out.find("shard map 1: 6 of its 6 replicas took their rows over in memory"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("shard map 2: 4 of its 4 replicas took their rows over in memory"),
              std::string::npos)
        << out;
    EXPECT_EQ(out.find("restores the handover generation instead"), std::string::npos) << out;
  } else {
    EXPECT_NE(out.find("shard map 1: started 3 servers in place of 2 (each with 1 backup)"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("shard map 2: started 2 servers in place of 3 (each with 1 backup)"),
              std::string::npos)
        << out;
  }
  EXPECT_NE(out.find("started server 0 backup 1 of shard map 1 (pid"), std::string::npos) << out;
  EXPECT_NE(out.find("its primary handed the shard's rows over to shard map 1 at clock"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("serves as the primary"), std::string::npos) << out;
  ExpectExactSums(out, 5000, stop);
}

TEST_F(E2eTest, AReplicatedJobGrowsAndShrinksWhileTrainingWithExactSumsThroughAFailOver) {
  ReshardReplicatedJob("");
}

// The same under etcd's authority (a real etcd on loopback): each map's
// replicas take their shards' keys under a prefix of the map's own,
// whatever keys the old map's servers hold until their leases lapse. The
// killed primary's replica started again (by ps_launch, at once, under a
// new lease while the old one still holds its key) is joined by the
// promoted primary and takes a copy of its own before the next reshard.
TEST_F(E2eTest, AReplicatedJobUnderEtcdGrowsAndShrinksWhileTrainingWithExactSumsThroughAFailOver) {
  auto etcd = EtcdServer::Start();
  if (EtcdServer::NotInstalled(etcd.status())) GTEST_SKIP() << etcd.status().message();
  ASSERT_OK(etcd);
  ReshardReplicatedJob(", authority: etcd, etcd: { endpoints: [\"" + (*etcd)->endpoint() +
                       "\"], prefix: /ps/e2e-reshard-" + std::to_string(getpid()) +
                       ", lease_ttl_s: 1, request_timeout_ms: 300 }");
}

// A server killed while a reshard is committed but before the handover (a
// worker stopped keeps the job short of the handover clock): ps_launch
// stops the job naming it instead of restarting a server that knows
// nothing of the reshard, and the job resumes from its checkpoints with
// exact sums.
TEST_F(E2eTest, AServerKilledDuringAReshardStopsTheJobAndItResumesWithExactSums) {
  RangeJob run;
  ASSERT_NO_FATAL_FAILURE(StartRangeJobOnTwo(&run));
  // Worker 1 stops: no clock passes, so the shards stay short of the
  // handover clock once the reshard is committed.
  const pid_t worker1 = run.Pid("worker 1"), server0 = run.Pid("server 0");
  ASSERT_GT(worker1, 0) << run.Log();
  ASSERT_GT(server0, 0) << run.Log();
  ASSERT_EQ(kill(worker1, SIGSTOP), 0);
  Subprocess* ctl =
      Start({kCtl, "reshard", "--config", run.job2, "--to", run.job3, "--wait-s", "5"}, true);
  ASSERT_TRUE(run.WaitFor("shard 1: the handover to map 1 at clock")) << run.Log();
  ASSERT_EQ(kill(server0, SIGKILL), 0);
  kill(worker1, SIGCONT);
  ASSERT_OK(run.launch->WaitFor(milliseconds(60000)));
  const std::string failed = run.Log();
  EXPECT_NE(failed.find("server 0 killed by signal 9 (Killed) while the job was being moved onto "
                        "other servers (ps_ctl reshard); stopping the job"),
            std::string::npos)
      << failed;
  EXPECT_NE(failed.find("job failed"), std::string::npos) << failed;
  auto [ctl_status, ctl_out] = Finish(ctl, milliseconds(60000));
  EXPECT_FALSE(ExitedSuccessfully(ctl_status)) << ctl_out;

  // The job resumes on its 2 servers from the newest generation both hold;
  // every row holds the sum of every clock's pushes up to the stop.
  std::ofstream(run.stop_file) << 400 << "\n";
  auto [status, out] = Finish(Start({kLaunch, "--config", run.job2, "--resume"}, true),
                              milliseconds(120000));
  EXPECT_TRUE(ExitedSuccessfully(status)) << out;
  EXPECT_NE(out.find("[worker 0] exact: every one of 10000 rows and 0 hashed ids holds 1200.0 "
                     "after 400 clocks"),
            std::string::npos)
      << out;
}

// ps_server --follow refuses what it cannot follow, by name: without a
// next map's epoch (a flag error, exit 2); an old job file that does not
// load, or whose tables differ (exit 5: it does not take over, and
// ps_launch starts it restoring the handover generation instead).
// A replica that joins takes its state from the shard's primary: asked to
// restore a generation too, ps_server refuses the flags (exit 2). (A
// replica that etcd's authority tells to join restores none, whatever
// --restore-clock ps_launch gave it.)
TEST_F(E2eTest, AJoiningReplicaRefusesARestoreClock) {
  const std::vector<int> ports = {FreePort(), FreePort()};
  const std::string job = ReshardJob(ports, 2, "job2", (dir_ / "ckpt").string(),
                                     (dir_ / "stop").string(), /*hashed=*/false, 20,
                                     "replication: { factor: 2, port_offset: 1 }\n");
  auto [status, out] =
      Finish(Start({kServer, "--config", job, "--shard", "0", "--replica", "1", "--join",
                    "--restore-clock", "20"},
                   true),
             milliseconds(30000));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << out;
  EXPECT_NE(out.find("--join: a joining replica takes its state from the shard's primary; not "
                     "with --restore-clock"),
            std::string::npos)
      << out;
}

TEST_F(E2eTest, AServerThatCannotFollowSaysWhyAndExitsFive) {
  const std::string ckpt = (dir_ / "ckpt").string();
  const std::string stop_file = (dir_ / "stop").string();
  const std::vector<int> ports = {FreePort(), FreePort(), FreePort()};
  const std::string job2 = ReshardJob(ports, 2, "job2", ckpt, stop_file, /*hashed=*/true, 20);
  const std::string job3 = ReshardJob(ports, 3, "job3", ckpt, stop_file, /*hashed=*/false, 20);
  const auto run = [&](std::vector<std::string> flags) {
    std::vector<std::string> argv = {kServer, "--config", job3, "--shard", "2"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return Finish(Start(argv, true), milliseconds(30000));
  };
  auto [no_epoch, no_epoch_out] = run({"--follow", job2});
  EXPECT_TRUE(WIFEXITED(no_epoch) && WEXITSTATUS(no_epoch) == 2) << no_epoch_out;
  EXPECT_NE(no_epoch_out.find("--follow: a server of a next shard map (--map-epoch 1 or more)"),
            std::string::npos)
      << no_epoch_out;
  const std::string missing = (dir_ / "missing.yaml").string();
  auto [gone, gone_out] = run({"--map-epoch", "1", "--follow", missing});
  EXPECT_TRUE(WIFEXITED(gone) && WEXITSTATUS(gone) == 5) << gone_out;
  EXPECT_NE(gone_out.find("shard 2 of map 1 does not take its rows over in memory"),
            std::string::npos)
      << gone_out;
  EXPECT_NE(gone_out.find(missing), std::string::npos) << gone_out;
  auto [other, other_out] = run({"--map-epoch", "1", "--follow", job2});
  EXPECT_TRUE(WIFEXITED(other) && WEXITSTATUS(other) == 5) << other_out;
  EXPECT_NE(other_out.find("the next job file has 1 tables, the job 2"), std::string::npos)
      << other_out;
}

// A server of the next map killed while it follows the old servers' rows
// (before the handover: a worker stopped keeps the job short of the
// handover clock) is replaced, once the old servers handed over, by one
// that restores the handover generation; the other two serve the rows they
// followed, and every sum is exact at the end.
TEST_F(E2eTest, AFollowerKilledBeforeTheHandoverIsReplacedByAServerRestoringTheGeneration) {
  RangeJob run;
  ASSERT_NO_FATAL_FAILURE(StartRangeJobOnTwo(&run));
  const pid_t worker1 = run.Pid("worker 1");
  ASSERT_GT(worker1, 0) << run.Log();
  ASSERT_EQ(kill(worker1, SIGSTOP), 0);
  Subprocess* ctl =
      Start({kCtl, "reshard", "--config", run.job2, "--to", run.job3, "--wait-s", "60"}, true);
  ASSERT_TRUE(run.WaitFor("shard 1: the handover to map 1 at clock")) << run.Log();
  const pid_t follower = run.Pid("server 2 of shard map 1");
  ASSERT_GT(follower, 0) << run.Log();
  ASSERT_EQ(kill(follower, SIGKILL), 0);
  ASSERT_TRUE(run.WaitFor("restores the handover generation instead")) << run.Log();
  ASSERT_EQ(kill(worker1, SIGCONT), 0);
  auto [ctl_status, ctl_out] = Finish(ctl, milliseconds(90000));
  EXPECT_TRUE(ExitedSuccessfully(ctl_status)) << ctl_out << run.Log();
  EXPECT_NE(ctl_out.find("the job runs on 3 servers at map 1 from clock"), std::string::npos)
      << ctl_out;
  ASSERT_TRUE(WaitPastClock(run.log, NewestClock(run.log) + 100)) << run.Log();
  const int64_t stop = NewestClock(run.log) + 200;
  std::ofstream(run.stop_file) << stop << "\n";
  ASSERT_OK(run.launch->WaitFor(milliseconds(120000)));
  const std::string out = run.Log();
  EXPECT_NE(out.find("shard map 1: 2 of its 3 servers took their rows over in memory (they "
                     "followed the old servers); starting the others"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("shard map 1: started 1 server in place of 2"), std::string::npos) << out;
  ExpectExactSums(out, 0, stop);
}

// A primary of a replicated job killed while the next map's replicas
// follow the old primaries (ps_ctl reshard planned the move and picked no
// handover clock yet: its plan is written here as it writes it, so the
// job stays in that stage): ps_launch stops the followers and handles the
// death as at any other time (the backup serves, the dead replica
// rejoins), and does not start followers again for that plan; the
// reshard then moves the rows through the handover generation, and every
// sum is exact at the end. A backup killed before leaves the followers be.
TEST_F(E2eTest, AReplicatedPrimaryKilledWhileTheNextMapFollowsFailsOverAndTheMoveGoesOn) {
  RangeJob run;
  ASSERT_NO_FATAL_FAILURE(StartRangeJobOnTwo(&run, /*factor=*/2));
  const std::string ckpt = (dir_ / "ckpt").string();
  std::ofstream(ckpt + "/reshard-1.plan")
      << "epoch 1\nclock -1\nconfig " << run.job3 << "\nfollow 1\n";
  // Every replica of the next map follows; shard 0's primary has sent its
  // copy to those of shards 0 and 1.
  ASSERT_TRUE(run.WaitFor("started server 2 of shard map 1 (pid")) << run.Log();
  ASSERT_TRUE(run.WaitFor("shard 0: sending the server of map 1 at")) << run.Log();
  // A backup's death leaves the followers be: they follow the primaries.
  const pid_t backup = run.Pid("server 1 backup 1");
  ASSERT_GT(backup, 0) << run.Log();
  ASSERT_EQ(kill(backup, SIGKILL), 0);
  ASSERT_TRUE(run.WaitFor("shard 1's primary goes on without it")) << run.Log();
  EXPECT_EQ(run.Log().find("they stop, and the rows move"), std::string::npos) << run.Log();
  const pid_t primary = run.Pid("server 0");
  ASSERT_GT(primary, 0) << run.Log();
  ASSERT_EQ(kill(primary, SIGKILL), 0);
  ASSERT_TRUE(run.WaitFor("they stop, and the rows move through the handover generation"))
      << run.Log();
  ASSERT_TRUE(run.WaitFor("server 0 backup 1 is shard 0's primary now")) << run.Log();
  ASSERT_TRUE(WaitPastClock(run.log, NewestClock(run.log) + 50)) << run.Log();
  const std::string moved = ReshardTo(run.job2, run.job3, run.log);
  EXPECT_NE(moved.find("the job runs on 3 servers at map 1 from clock"), std::string::npos)
      << moved;
  EXPECT_NE(moved.find("not every server of the next map follows the old ones"),
            std::string::npos)
      << moved;
  ASSERT_TRUE(WaitPastClock(run.log, NewestClock(run.log) + 100)) << run.Log();
  const int64_t stop = NewestClock(run.log) + 200;
  std::ofstream(run.stop_file) << stop << "\n";
  ASSERT_OK(run.launch->WaitFor(milliseconds(120000)));
  const std::string out = run.Log();
  EXPECT_NE(out.find("did not take its rows over in memory"), std::string::npos) << out;
  EXPECT_NE(out.find("shard map 1: started 3 servers in place of 2 (each with 1 backup)"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("took their rows over in memory"), std::string::npos) << out;
  ExpectExactSums(out, 0, stop);
}

// A server of the next shard map killed once it served its part of the
// move (its first clock's push), before it wrote a generation of its own,
// is started again as ps_launch does (no --restore-clock): it restores the
// handover generation from the old shards' parts, not an empty or older
// state, and the worker's client sends it what was unanswered and goes on.
// As for any shard of factor 1, the updates since the generation on it are
// what the crash cost (the servers here are started by hand, as ps_ctl
// prints without ps_launch, so the test knows each clock's place).
TEST_F(E2eTest, AServerOfTheNextMapKilledDuringTheMoveComesBackFromTheHandoverGeneration) {
  const std::string ckpt = (dir_ / "ckpt").string();
  const std::vector<int> ports = {FreePort(), FreePort(), FreePort()};
  const auto job = [&](int servers) {
    std::string list;
    for (int i = 0; i < servers; ++i) {
      list += (i ? ", " : "") + std::string("\"127.0.0.1:") + std::to_string(ports[i]) + "\"";
    }
    const std::string path = (dir_ / ("job" + std::to_string(servers) + ".yaml")).string();
    std::ofstream(path) << "cluster: { servers: [" << list << "], workers: 1 }\n"
                        << "tables:\n  - { name: acc, rows: 1000, dim: 1, optimizer: { type: add } }\n"
                        << "consistency: { mode: bsp }\n"
                        << "client: { request_timeout_ms: 3000 }\n"
                        << "liveness: { timeout_ms: 2000, server_down_timeout_ms: 30000 }\n"
                        << "checkpoint: { dir: " << ckpt << ", every_clocks: 5, sync: false }\n";
    return path;
  };
  const std::string job2 = job(2), job3 = job(3);
  Subprocess* old0 = StartServer(job2, 0);
  Subprocess* old1 = StartServer(job2, 1);
  auto loaded = LoadJobFile(job2);
  ASSERT_OK(loaded);
  auto client = Client::Create(*loaded, 0);
  ASSERT_OK(client);
  Client& c = **client;
  ASSERT_OK(c.Join());
  const auto clock_of_ones = [&] {
    auto push = c.PushDense(0, SharedFloats::Take(std::vector<float>(1000, 1.0f)));
    ASSERT_OK(push);
    ASSERT_OK(c.Wait(*push));
    auto clock = c.Clock();
    ASSERT_OK(clock);
    ASSERT_OK(c.Wait(*clock));
  };
  for (int i = 0; i < 10; ++i) clock_of_ones();  // clocks 0..9

  // The reshard 2 -> 3: ps_ctl prepares two clocks past the worker (12).
  const std::string ctl_log = (dir_ / "ctl.log").string();
  Subprocess* ctl = Start({"/bin/sh", "-c", "exec " + kCtl + " reshard --config " + job2 +
                                                " --to " + job3 + " --wait-s 60 > " + ctl_log +
                                                " 2>&1"});
  ASSERT_NE(ctl, nullptr);
  WaitForText(ctl_log, "every shard hands over at clock 12");
  ASSERT_NE(ReadText(ctl_log).find("every shard hands over at clock 12"), std::string::npos)
      << ReadText(ctl_log);
  clock_of_ones();  // 10
  clock_of_ones();  // 11: the minimum clock reaches 12 and both shards hand over
  for (Subprocess* old : {old0, old1}) {
    auto exited = old->WaitFor(milliseconds(30000));
    ASSERT_OK(exited);
    EXPECT_TRUE(WIFEXITED(*exited) && WEXITSTATUS(*exited) == 3) << DescribeWaitStatus(*exited);
  }
  const auto start_next = [&](int shard, bool restarted) {
    std::vector<std::string> argv = {kServer, "--config", job3, "--shard", std::to_string(shard),
                                     "--map-epoch", "1"};
    if (!restarted) argv.insert(argv.end(), {"--restore-clock", "12"});
    return Start(argv, /*capture=*/restarted);
  };
  start_next(0, false);
  start_next(1, false);
  Subprocess* target = start_next(2, false);
  ASSERT_NE(target, nullptr);
  // Clock 12 goes to the old addresses, is moved, and is sent to the 3
  // servers; the pull reads it back from them.
  std::vector<float> w(1000, -1.0f);
  clock_of_ones();
  ASSERT_OK(c.Wait(*c.PullDense(0, w.data())));
  EXPECT_EQ(w, std::vector<float>(1000, 13.0f));
  EXPECT_EQ(c.num_shards(), 3u);
  auto ctl_done = ctl->WaitFor(milliseconds(60000));
  ASSERT_OK(ctl_done);
  EXPECT_TRUE(WIFEXITED(*ctl_done) && WEXITSTATUS(*ctl_done) == 0) << ReadText(ctl_log);

  // Server 2 of map 1 dies before it wrote a generation of its own.
  ASSERT_OK(target->Signal(SIGKILL));
  ASSERT_OK(target->WaitFor(milliseconds(5000)));
  auto push = c.PushDense(0, SharedFloats::Take(std::vector<float>(1000, 1.0f)));
  auto clock = c.Clock();
  auto pull = c.PullDense(0, w.data());
  ASSERT_TRUE(push.ok() && clock.ok() && pull.ok());
  ASSERT_OK(c.Poll(300));
  Subprocess* restarted = start_next(2, true);
  ASSERT_OK(c.Wait(*push));
  ASSERT_OK(c.Wait(*clock));
  ASSERT_OK(c.Wait(*pull));
  // Its rows hold generation 12 and clock 13's push: clock 12's update on
  // it was lost with it, as the shard reports.
  const RowRange r2 = ShardRows(1000, 3, 2);
  for (uint64_t row = 0; row < 1000; ++row) {
    ASSERT_EQ(w[row], r2.Contains(row) ? 13.0f : 14.0f) << "row " << row;
  }
  auto stats = c.Stats(2);
  ASSERT_OK(stats);
  EXPECT_NE(stats->find("recovery started_clock 12 lost_clocks 1"), std::string::npos) << *stats;
  ASSERT_OK(c.ShutdownServers());
  auto [status, out] = Finish(restarted, milliseconds(10000));
  EXPECT_TRUE(ExitedSuccessfully(status)) << out;
  EXPECT_NE(out.find("restored " + ckpt + "/shard-{0..1}/gen-12"), std::string::npos) << out;
}

// ps_launch (the authority over the shard map) killed during a reshard,
// once the handover is committed and once a shard handed over: every
// process it started goes with it (none is left serving an old or a half
// map), ps_ctl names what it waited for, and the job resumes on the next
// job file from its checkpoints (the plan the killed run left is removed
// and said) with exact sums.
TEST_F(E2eTest, TheLauncherKilledDuringAReshardTakesItsProcessesAlongAndTheJobResumesExactly) {
  for (const std::string kill_at : {"committed", "handed over"}) {
    SCOPED_TRACE("ps_launch killed once the reshard was " + kill_at);
    const std::string tag = kill_at == "committed" ? "a" : "b";
    const std::string ckpt = (dir_ / ("ckpt-" + tag)).string();
    const std::string stop_file = (dir_ / ("stop-" + tag)).string();
    std::ofstream(stop_file) << "";
    const std::vector<int> ports = {FreePort(), FreePort(), FreePort()};
    const std::string job2 = ReshardJob(ports, 2, "job2" + tag, ckpt, stop_file, false, 20);
    const std::string job3 = ReshardJob(ports, 3, "job3" + tag, ckpt, stop_file, false, 20);
    const std::string log = (dir_ / ("launch-" + tag + ".log")).string();
    Subprocess* launch = StartLaunchLogged(job2, log);
    ASSERT_NE(launch, nullptr);
    const auto read_log = [&] { return ReadText(log); };
    const auto wait_for = [&](const std::string& what) { return WaitForText(log, what); };
    ASSERT_TRUE(wait_for("[worker 0] clock 100")) << read_log();
    // Every process ps_launch started so far (and of the next map, once it
    // starts them), by pid.
    const auto started = [&] {
      static const std::regex line(R"(started [a-z]+ \d+(?: of shard map \d+)? \(pid (\d+)\))");
      std::vector<pid_t> pids;
      const std::string text = read_log();
      for (std::sregex_iterator it(text.begin(), text.end(), line), end; it != end; ++it) {
        pids.push_back(static_cast<pid_t>(std::stol((*it)[1])));
      }
      return pids;
    };
    const std::vector<pid_t> children = started();
    ASSERT_EQ(children.size(), 4u) << read_log();  // 2 servers, 2 workers
    if (kill_at == "committed") {
      // Worker 1 stops, so no shard reaches the handover clock.
      ASSERT_EQ(kill(children[3], SIGSTOP), 0);
    }
    // Committed, the next map's servers follow the old ones in memory (they
    // go with ps_launch too); handed over, the rows move through the
    // generation, so that no server of the next map serves before
    // ps_launch starts it (one that followed may serve before ps_launch
    // learns of the handover, and ps_ctl would see the move done).
    std::vector<std::string> reshard = {kCtl,  "reshard",  "--config", job2,
                                        "--to", job3,     "--wait-s", "5"};
    if (kill_at == "handed over") reshard.push_back("--through-generation");
    Subprocess* ctl = Start(reshard, true);
    ASSERT_TRUE(wait_for(kill_at == "committed" ? "shard 1: the handover to map 1 at clock"
                                                : "it handed its rows over at clock"))
        << read_log();
    ASSERT_EQ(kill(launch->pid(), SIGKILL), 0);
    auto killed = launch->WaitFor(milliseconds(5000));
    ASSERT_OK(killed);
    // Committed, the plan is on disk; once a shard handed over, ps_launch
    // may have started the next map and removed it already.
    const bool had_plan = fs::exists(ckpt + "/reshard-1.plan");
    if (kill_at == "committed") {
      EXPECT_TRUE(had_plan) << read_log();
    }
    // Each child got SIGKILL when ps_launch died (a stopped one too).
    const auto gone = [](pid_t pid) {
      std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
      std::string text;
      std::getline(stat, text);
      const size_t paren = text.rfind(')');
      return !stat.good() || paren == std::string::npos || text.substr(paren + 2, 1) == "Z";
    };
    for (pid_t pid : started()) {
      const auto deadline = Steady::now() + std::chrono::seconds(10);
      while (!gone(pid) && Steady::now() < deadline) std::this_thread::sleep_for(milliseconds(20));
      EXPECT_TRUE(gone(pid)) << "pid " << pid << " outlived ps_launch\n" << read_log();
    }
    auto [ctl_status, ctl_out] = Finish(ctl, milliseconds(60000));
    EXPECT_FALSE(ExitedSuccessfully(ctl_status)) << ctl_out;
    EXPECT_NE(ctl_out.find("ps_ctl reshard: "), std::string::npos) << ctl_out;
    // A shard may hand over as soon as it is committed, while ps_ctl still
    // commits the others: a commit that then fails (its server went with
    // ps_launch) makes ps_ctl give up and remove the plan itself.
    const bool plan_left = fs::exists(ckpt + "/reshard-1.plan");

    // Resumed on the next job file: every row holds the sum of every
    // clock's pushes up to the stop.
    std::ofstream(stop_file) << 300 << "\n";
    auto [status, out] = Finish(Start({kLaunch, "--config", job3, "--resume"}, true),
                                milliseconds(120000));
    EXPECT_TRUE(ExitedSuccessfully(status)) << out;
    EXPECT_EQ(out.find("checkpoint: removed " + ckpt + "/reshard-1.plan, the plan of a reshard "
                       "an earlier run stopped during; this run serves the 3 servers of " + job3) !=
                  std::string::npos,
              plan_left)
        << out;
    EXPECT_NE(out.find("[worker 0] exact: every one of 10000 rows and 0 hashed ids holds 900.0 "
                       "after 300 clocks"),
              std::string::npos)
        << out;
    EXPECT_FALSE(fs::exists(ckpt + "/reshard-1.plan"));
  }
}

// Incremental checkpoints (checkpoint.full_every): a job of 2 servers
// writes full generations and deltas; it resumes on 3 servers from a delta
// (each new server merging the chain of every old shard's part) and ends
// with the exact sums of every push since clock 0.
TEST_F(E2eTest, AJobResumesFromADeltaGenerationOnThreeServersWithExactSums) {
  const std::string ckpt = (dir_ / "ckpt").string();
  const auto job = [&](int servers, const std::string& name, int64_t stop) {
    return PusherJob(servers, name, stop,
                     "{ dir: " + ckpt + ", every_clocks: 10, full_every: 4, sync: false }");
  };
  const std::string first = RunLaunch(job(2, "job2", 60), false);
  EXPECT_NE(first.find("exact: every one of 10000 rows and 5000 hashed ids holds 180.0 after 60 "
                       "clocks"),
            std::string::npos)
      << first;
  // Every clock changes every row: a delta as large as the full generation
  // before it, so they take turns; generation 60 is a delta on 50.
  EXPECT_NE(first.find("shard-1/gen-60 in"), std::string::npos) << first;
  EXPECT_NE(first.find("(a delta on clock 50"), std::string::npos) << first;
  EXPECT_TRUE(fs::exists(fs::path(ShardCheckpointDir(ckpt, 0)) / "gen-60" / "base-50")) << first;
  EXPECT_FALSE(fs::exists(fs::path(ShardCheckpointDir(ckpt, 0)) / "gen-50" / "base-40")) << first;

  const std::string second = RunLaunch(job(3, "job3", 80), true);
  EXPECT_NE(second.find("checkpoint: every shard restores clock 60 from " + ckpt +
                        ", written by 2 shards"),
            std::string::npos)
      << second;
  EXPECT_NE(second.find("exact: every one of 10000 rows and 5000 hashed ids holds 240.0 after "
                        "80 clocks"),
            std::string::npos)
      << second;
}

TEST_F(E2eTest, PsCtlCheckpointWritesEveryShardNow) {
  const std::string ckpt = (dir_ / "ckpt").string();
  const std::string path = WriteJob(
      2, 1,
      "tables: [ { name: w, rows: 5000, dim: 4, init: { type: normal, stddev: 1 },\n"
      "            optimizer: { type: adam, lr: 0.01 } } ]\n"
      "checkpoint: { dir: " + ckpt + " }\n");
  Subprocess* servers[] = {StartServer(path, 0), StartServer(path, 1)};
  auto [status, out] =
      Finish(Start({kCtl, "checkpoint", "--config", path}, true), milliseconds(30000));
  EXPECT_TRUE(ExitedSuccessfully(status)) << out;
  EXPECT_NE(out.find("writing " + ckpt + "/shard-1/gen-0"), std::string::npos) << out;
  EXPECT_NE(out.find("all 2 checkpoints written"), std::string::npos) << out;
  for (int s = 0; s < 2; ++s) {
    auto dir = CheckpointDir::Open(ShardCheckpointDir(ckpt, static_cast<uint32_t>(s))).value();
    auto saved = dir->Read(0);
    ASSERT_OK(saved);
    EXPECT_EQ(saved->tables[0].slots.size(), 2u);  // Adam's moments are saved too
  }
  auto [sd_status, sd_out] =
      Finish(Start({kCtl, "shutdown", "--config", path}, true), milliseconds(10000));
  EXPECT_TRUE(ExitedSuccessfully(sd_status)) << sd_out;
  for (Subprocess* s : servers) ASSERT_OK(s->WaitFor(milliseconds(5000)));

  // A job without checkpoint.dir: ps_ctl says what to add.
  const std::string plain = WriteJob(1, 1, "tables: [ { name: w, rows: 10 } ]\n");
  StartServer(plain, 0);
  auto [no_status, no_out] =
      Finish(Start({kCtl, "checkpoint", "--config", plain}, true), milliseconds(10000));
  EXPECT_TRUE(WIFEXITED(no_status) && WEXITSTATUS(no_status) == 1) << no_out;
  EXPECT_NE(no_out.find("no checkpoint.dir"), std::string::npos) << no_out;
}

TEST_F(E2eTest, LaunchStopsTheJobWhenAServerCannotStart) {
  const std::string path = WriteJob(2, 2, TrainJob(100000));
  // Hold server 1's port so that ps_server 1 fails to bind.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(ports_[1]));
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  Subprocess* launch = Start({kLaunch, "--config", path, "--grace-ms", "2000"}, true);
  auto [status, out] = Finish(launch, milliseconds(30000));
  close(fd);
  EXPECT_FALSE(ExitedSuccessfully(status)) << out;
  EXPECT_NE(out.find("server 1 exited with code 1"), std::string::npos) << out;
  EXPECT_NE(out.find("another ps_server"), std::string::npos) << out;
}

TEST_F(E2eTest, CtrlCStopsEveryProcessOfTheJob) {
  const std::string path = WriteJob(2, 2, TrainJob(1000000));
  Subprocess* launch = Start({kLaunch, "--config", path, "--grace-ms", "3000"}, true);
  bool signalled = false;
  auto [status, out] = Finish(launch, milliseconds(30000), [&](const std::string& line) {
    if (!signalled && line.find("[worker 1]") != std::string::npos &&
        line.find("step") != std::string::npos) {
      EXPECT_OK(launch->Signal(SIGINT));
      signalled = true;
    }
  });
  ASSERT_TRUE(signalled) << out;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 130) << DescribeWaitStatus(status) << out;
  // Every server is gone: its port can be bound again.
  for (int port : ports_) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << "port " << port;
    close(fd);
  }
}

TEST_F(E2eTest, BinariesRejectABadConfigNamingFileAndPath) {
  const std::string path = (dir_ / "bad.yaml").string();
  std::ofstream(path) << "cluster: { servers: [\"127.0.0.1:7000\"], workers: 1 }\n"
                         "tables:\n  - { name: w, rows: 0 }\n";
  for (const std::string& bin : {kServer, kWorker, kLaunch}) {
    std::vector<std::string> argv = {bin, "--config", path};
    if (bin == kServer) argv.insert(argv.end(), {"--shard", "0"});
    if (bin == kWorker) argv.insert(argv.end(), {"--rank", "0"});
    Subprocess* p = Start(argv, true);
    auto [status, out] = Finish(p, milliseconds(10000));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << bin << ": " << out;
    EXPECT_NE(out.find("bad.yaml"), std::string::npos) << bin << ": " << out;
    EXPECT_NE(out.find("tables[0].rows"), std::string::npos) << bin << ": " << out;
  }
}

TEST_F(E2eTest, WorkerAndLauncherRejectABadTrainSectionNamingFileAndPath) {
  // The train section is the workers': ps_server skips it, and ps_launch
  // reads it, so that a bad one stops the job before any process starts.
  const std::string path = (dir_ / "bad_train.yaml").string();
  std::ofstream(path) << "cluster: { servers: [\"127.0.0.1:7000\"], workers: 1 }\n"
                         "tables:\n  - { name: w, rows: 4 }\n"
                         "train: { table: w, features: 4, batchsize: 8 }\n";
  for (const std::string& bin : {kWorker, kLaunch}) {
    std::vector<std::string> argv = {bin, "--config", path};
    if (bin == kWorker) argv.insert(argv.end(), {"--rank", "0"});
    Subprocess* p = Start(argv, true);
    auto [status, out] = Finish(p, milliseconds(10000));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << bin << ": " << out;
    EXPECT_NE(out.find("bad_train.yaml: train.batchsize: unknown key"), std::string::npos)
        << bin << ": " << out;
    EXPECT_EQ(out.find("[server 0]"), std::string::npos) << bin << ": " << out;
  }
}

class WorkerDeathTest : public E2eTest {
 protected:
  // Starts 2 servers and 3 workers (bsp, heartbeats every 100 ms, dead
  // after 1 s), kills worker 2 with SIGKILL once it trains, and returns the
  // other two workers' {wait status, output}.
  std::vector<std::pair<int, std::string>> KillWorker2(const std::string& policy) {
    const std::string path = WriteJob(
        2, 3,
        "tables:\n"
        "  - { name: weights, rows: 32, dim: 1, optimizer: { type: sgd, lr: 0.05 } }\n"
        "consistency: { mode: bsp }\n"
        "liveness: { heartbeat_ms: 100, timeout_ms: 1000, on_dead_worker: " + policy + " }\n"
        "train: { table: weights, features: 32, samples_per_worker: 2048, batch_size: 32,\n"
        "         iterations: 3000, log_every: 10 }\n");
    StartServer(path, 0);
    StartServer(path, 1);
    Subprocess* workers[3];
    for (int r = 0; r < 3; ++r) {
      workers[r] = Start({kWorker, "--config", path, "--rank", std::to_string(r)}, true);
    }
    // Wait until worker 2 trains, then kill it.
    LineReader reader;
    std::vector<std::string> lines;
    bool training = false;
    const auto deadline = Steady::now() + milliseconds(20000);
    while (!training && Steady::now() < deadline) {
      pollfd pfd{workers[2]->output_fd(), POLLIN, 0};
      poll(&pfd, 1, 100);
      auto r = reader.ReadFrom(workers[2]->output_fd(), &lines);
      if (!r.ok() || *r) break;
      for (const auto& l : lines) training |= l.find("step    10") != std::string::npos;
      lines.clear();
    }
    EXPECT_TRUE(training) << "worker 2 never started training";
    EXPECT_OK(workers[2]->Signal(SIGKILL));
    std::vector<std::pair<int, std::string>> results;
    for (int r = 0; r < 2; ++r) results.push_back(Finish(workers[r], milliseconds(60000)));
    return results;
  }
};

TEST_F(WorkerDeathTest, UnderPolicyFailTheOthersStopNamingTheDeadWorker) {
  for (auto& [status, out] : KillWorker2("fail")) {
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << DescribeWaitStatus(status) << out;
    EXPECT_NE(out.find("worker 2 is dead: nothing heard from it for"), std::string::npos) << out;
    EXPECT_NE(out.find("on_dead_worker: fail"), std::string::npos) << out;
  }
}

TEST_F(WorkerDeathTest, UnderPolicyDropTheOthersFinishTraining) {
  for (auto& [status, out] : KillWorker2("drop")) {
    EXPECT_TRUE(ExitedSuccessfully(status)) << DescribeWaitStatus(status) << out;
    EXPECT_NE(out.find("step  2999"), std::string::npos) << out;
  }
}

TEST_F(E2eTest, WorkerAskedForCudaWithoutADeviceSaysSo) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "this machine has a CUDA device";
  const std::string path = WriteJob(1, 1, TrainJob(10) + "worker: { device: cuda }\n");
  Subprocess* p = Start({kWorker, "--config", path, "--rank", "0"}, true);
  auto [status, out] = Finish(p, milliseconds(10000));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << out;
  EXPECT_NE(out.find("worker.device"), std::string::npos) << out;
  EXPECT_NE(out.find("no CUDA device is usable"), std::string::npos) << out;
}

TEST_F(E2eTest, ServerRejectsAShardOutsideTheJob) {
  const std::string path = WriteJob(2, 1, "tables:\n  - { name: w, rows: 10 }\n");
  Subprocess* p = Start({kServer, "--config", path, "--shard", "2"}, true);
  auto [status, out] = Finish(p, milliseconds(10000));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << out;
  EXPECT_NE(out.find("shard 2 (from --shard) is out of range"), std::string::npos) << out;
}

// Servers and workers started by hand, in any order, as a cluster launcher
// starts them: the workers find the servers, a worker that comes later than
// liveness.timeout_ms is not taken for dead, and the servers exit 0 once
// every worker has left (server.exit_when_workers_leave).
TEST_F(E2eTest, ServersStartedByHandExitZeroOnceEveryWorkerHasLeft) {
  const std::string path =
      WriteJob(2, 2, TrainJob(60) +
                         "liveness: { heartbeat_ms: 100, timeout_ms: 500 }\n"
                         "client: { request_timeout_ms: 5000 }\n"
                         "rendezvous: { timeout_ms: 20000 }\n");
  Subprocess* servers[2];
  for (int s = 0; s < 2; ++s) {
    servers[s] = Start({kServer, "--config", path, "--shard", std::to_string(s)}, true);
  }
  // The workers come once both servers have served twice liveness.timeout_ms
  // (their uptime in STATS): within the start-up grace period.
  {
    auto job = LoadJobFile(path);
    ASSERT_OK(job);
    auto control = ControlClient::Create(*job);
    ASSERT_OK(control);
    const std::regex uptime(R"(uptime_s ([0-9.e+-]+))");
    for (uint32_t s = 0; s < 2; ++s) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      double up = 0;
      while (up < 1.0 && std::chrono::steady_clock::now() < deadline) {
        auto stats = (*control)->Stats(s);
        std::smatch m;
        if (stats.ok() && std::regex_search(*stats, m, uptime)) up = std::stod(m[1]);
        if (up < 1.0) std::this_thread::sleep_for(milliseconds(50));
      }
      ASSERT_GE(up, 1.0) << "server " << s << " did not serve for 1 s within 30 s";
    }
  }
  Subprocess* workers[2];
  for (int r = 0; r < 2; ++r) {
    workers[r] = Start({kWorker, "--config", path, "--rank", std::to_string(r)}, true);
  }
  for (int r = 0; r < 2; ++r) {
    auto [status, out] = Finish(workers[r], milliseconds(60000));
    EXPECT_TRUE(ExitedSuccessfully(status)) << DescribeWaitStatus(status) << "\n" << out;
    EXPECT_NE(out.find("all 2 servers answered; job fingerprint "), std::string::npos) << out;
  }
  for (int s = 0; s < 2; ++s) {
    auto [status, out] = Finish(servers[s], milliseconds(10000));
    EXPECT_TRUE(ExitedSuccessfully(status)) << DescribeWaitStatus(status) << "\n" << out;
    EXPECT_NE(out.find("every worker has left the job; the shard exits"), std::string::npos)
        << out;
    EXPECT_EQ(out.find("is dead"), std::string::npos) << out;
  }
}

TEST_F(E2eTest, AWorkerOfAnotherJobFailsAtStartNamingTheFieldAndBothValues) {
  const std::string path = WriteJob(1, 2, TrainJob(10));
  Subprocess* server = Start({kServer, "--config", path, "--shard", "0"}, true);
  // The same server, a job file that disagrees on the worker count.
  const std::string other = (dir_ / "other.yaml").string();
  std::ofstream(other) << "cluster: { servers: [\"127.0.0.1:" << ports_[0]
                       << "\"], workers: 3 }\n" << TrainJob(10);
  Subprocess* worker = Start({kWorker, "--config", other, "--rank", "0"}, true);
  auto [status, out] = Finish(worker, milliseconds(30000));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << DescribeWaitStatus(status) << out;
  EXPECT_NE(out.find("job mismatch: workers: shard 0 (127.0.0.1:" + std::to_string(ports_[0]) +
                     ") has \"2\", worker 0 has \"3\""),
            std::string::npos)
      << out;
  ASSERT_OK(server->Signal(SIGTERM));
  auto [server_status, server_out] = Finish(server, milliseconds(10000));
  EXPECT_TRUE(ExitedSuccessfully(server_status)) << server_out;
  EXPECT_NE(server_out.find("refused worker 0: job mismatch: workers"), std::string::npos)
      << server_out;
}

TEST_F(E2eTest, AWorkerWhoseServerNeverAnswersFailsWithinTheRendezvousTimeout) {
  const std::string path = WriteJob(1, 1, TrainJob(10) + "rendezvous: { timeout_ms: 500 }\n");
  const auto start = Steady::now();
  Subprocess* worker = Start({kWorker, "--config", path, "--rank", "0"}, true);
  auto [status, out] = Finish(worker, milliseconds(20000));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << DescribeWaitStatus(status) << out;
  EXPECT_NE(out.find("no answer within rendezvous.timeout_ms (500 ms) from server 0 (127.0.0.1:" +
                     std::to_string(ports_[0]) + ")"),
            std::string::npos)
      << out;
  EXPECT_LT(Steady::now() - start, milliseconds(10000));
}

TEST_F(E2eTest, AnMlpJobWithMoreWorkersThanTheDataServesIsRefusedAtLoad) {
  const std::string path = WriteJob(
      1, 70000,
      "tables:\n  - { name: mlp, rows: 7850, dim: 1 }\n"
      "train: { program: mlp, table: mlp, layers: [784, 10], batch_size: 64, iterations: 10 }\n");
  for (const std::vector<std::string>& argv :
       {std::vector<std::string>{kWorker, "--config", path, "--rank", "0"},
        std::vector<std::string>{kLaunch, "--config", path}}) {
    Subprocess* p = Start(argv, true);
    auto [status, out] = Finish(p, milliseconds(20000));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << DescribeWaitStatus(status) << out;
    EXPECT_NE(out.find("cluster.workers: got 70000: 60000 Fashion-MNIST training samples split "
                       "over 70000 workers leaves workers with no samples"),
              std::string::npos)
        << out;
  }
}

}  // namespace
}  // namespace ps
