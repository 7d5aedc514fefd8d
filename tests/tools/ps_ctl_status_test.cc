// ps_ctl status as people and scripts run it: against real ps_server
// processes on loopback, against a port nothing listens on, and --watch
// ended by SIGINT. Every process is a Subprocess, which kills and reaps it
// when the test ends, whatever happens.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "client/client.h"
#include "common/config.h"
#include "common/subprocess.h"
#include "tests/util/free_port.h"
#include "tests/util/status_matchers.h"

namespace ps {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using Steady = std::chrono::steady_clock;

const std::string kServer = std::string(PS_BINARY_DIR) + "/bin/ps_server";
const std::string kCtl = std::string(PS_BINARY_DIR) + "/bin/ps_ctl";

class PsCtlStatusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ps_ctl_status_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    procs_.clear();  // SIGKILL + reap anything still running
    fs::remove_all(dir_);
  }

  // A job of `ports.size()` shards on those loopback ports and 2 workers.
  std::string WriteJob(const std::vector<int>& ports, const std::string& rest = "") {
    std::string servers;
    for (size_t i = 0; i < ports.size(); ++i) {
      servers += (i ? ", " : "") + std::string("\"127.0.0.1:") + std::to_string(ports[i]) + "\"";
    }
    const std::string path = (dir_ / "job.yaml").string();
    std::ofstream(path) << "cluster: { servers: [" << servers << "], workers: 2 }\n"
                        << "tables: [ { name: w, rows: 1000, dim: 4, optimizer: { type: add } } ]\n"
                        << rest;
    return path;
  }

  Subprocess* Start(std::vector<std::string> argv, bool capture = true) {
    SubprocessOptions o;
    o.argv = std::move(argv);
    o.capture_output = capture;
    auto p = Subprocess::Spawn(o);
    EXPECT_OK(p);
    if (!p.ok()) return nullptr;
    procs_.push_back(std::move(*p));
    return procs_.back().get();
  }

  // Reads a captured child's output until it exits or `timeout` passes
  // (then it is killed and the test fails). Returns {wait status, output}.
  std::pair<int, std::string> Finish(Subprocess* p, milliseconds timeout) {
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
      for (auto& l : lines) out += l + "\n";
      lines.clear();
    }
    auto status = p->WaitFor(std::max(
        milliseconds(0), std::chrono::duration_cast<milliseconds>(deadline - Steady::now())));
    if (!status.ok()) {
      ADD_FAILURE() << p->program() << " did not finish in time; output:\n" << out;
      return {p->Terminate(milliseconds(1000)), out};
    }
    return {*status, out};
  }

  std::pair<int, std::string> Ctl(std::vector<std::string> args) {
    args.insert(args.begin(), kCtl);
    return Finish(Start(std::move(args)), milliseconds(20000));
  }

  // Waits until every shard of `job` answers STATS.
  void WaitForServers(const std::string& job) {
    const auto deadline = Steady::now() + milliseconds(20000);
    while (Steady::now() < deadline) {
      auto [status, out] = Ctl({"status", "--config", job, "--raw", "--timeout-ms", "500"});
      if (ExitedSuccessfully(status)) return;
      std::this_thread::sleep_for(milliseconds(100));
    }
    FAIL() << "the servers of " << job << " did not answer within 20 s";
  }

  fs::path dir_;
  std::vector<std::unique_ptr<Subprocess>> procs_;
};

TEST_F(PsCtlStatusTest, AServerThatIsNotRunningIsReportedWithinASecondAndAHalf) {
  const int port = FreePort();  // bound, then closed: nothing listens there
  const std::string job = WriteJob({port});
  const auto start = Steady::now();
  auto [status, out] = Ctl({"status", "--config", job});
  const auto took = Steady::now() - start;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << DescribeWaitStatus(status) << out;
  EXPECT_NE(out.find("shard 0 at 127.0.0.1:" + std::to_string(port) +
                     ": not running (connection refused)"),
            std::string::npos)
      << out;
  EXPECT_LT(took, milliseconds(1500)) << out;
}

TEST_F(PsCtlStatusTest, ShowsWorkersAndShardsOfARunningJobAsTextAndJson) {
  const std::vector<int> ports = {FreePort(), FreePort()};
  const std::string ckpt = (dir_ / "ckpt").string();
  const std::string path =
      WriteJob(ports, "checkpoint: { dir: " + ckpt + ", every_clocks: 1000 }\n");
  for (int s = 0; s < 2; ++s)
    Start({kServer, "--config", path, "--shard", std::to_string(s)},
          /*capture=*/false);
  WaitForServers(path);

  // Worker 0 pushes and finishes 3 clocks (and stays, so that no shard
  // counts it dead or gone); worker 1 never starts.
  auto job = LoadJobFile(path);
  ASSERT_OK(job);
  auto client = Client::Create(*job, 0);
  ASSERT_OK(client);
  (*client)->SetTargetClock(20);  // as ps_worker says train.iterations
  ASSERT_OK((*client)->Join());
  for (int step = 0; step < 3; ++step) {
    auto push = (*client)->PushDense(0, SharedFloats::Take(std::vector<float>(4000, 1.0f)));
    ASSERT_OK(push);
    ASSERT_OK((*client)->Wait(*push));
    auto clock = (*client)->Clock();
    ASSERT_OK(clock);
    ASSERT_OK((*client)->Wait(*clock));
  }

  auto [status, page] = Ctl({"status", "--config", path});
  EXPECT_TRUE(ExitedSuccessfully(status)) << DescribeWaitStatus(status) << page;
  EXPECT_NE(page.find("job " + path + ": 2 workers, 2 shards, consistency asp"), std::string::npos)
      << page;
  EXPECT_NE(page.find("worker 1 is slowest: 3 clocks behind worker 0"), std::string::npos) << page;
  EXPECT_NE(page.find("127.0.0.1:" + std::to_string(ports[1])), std::string::npos) << page;
  EXPECT_NE(page.find("MiB"), std::string::npos) << page;
  EXPECT_NE(page.find("clock 0"), std::string::npos) << page;  // the checkpoint column

  auto [json_status, text] = Ctl({"status", "--config", path, "--json"});
  EXPECT_TRUE(ExitedSuccessfully(json_status)) << text;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << text;
  EXPECT_EQ(j["all_answered"], true);
  EXPECT_EQ(j["job"]["shards"], 2);
  EXPECT_EQ(j["job"]["consistency"], "asp");
  ASSERT_EQ(j["workers"].size(), 2u);
  EXPECT_EQ(j["workers"][0]["clock"], 3);
  EXPECT_EQ(j["workers"][0]["target"], 20);
  EXPECT_TRUE(j["workers"][1]["target"].is_null());
  EXPECT_EQ(j["workers"][1]["clock"], 0);
  EXPECT_EQ(j["workers"][1]["behind"], 3);
  EXPECT_EQ(j["workers"][0]["state"], "training");
  EXPECT_EQ(j["slowest"]["worker"], 1);
  ASSERT_EQ(j["shards"].size(), 2u);
  for (int s = 0; s < 2; ++s) {
    const nlohmann::json& shard = j["shards"][s];
    EXPECT_EQ(shard["answered"], true) << shard;
    EXPECT_EQ(shard["endpoint"], "tcp://127.0.0.1:" + std::to_string(ports[s]));
    EXPECT_GT(shard["rss_bytes"].get<uint64_t>(), 0u) << shard;
    EXPECT_EQ(shard["values_bytes"], 500 * 4 * 4) << shard;  // 500 rows x 4 floats, add: no state
    EXPECT_EQ(shard["checkpoint"]["writing"], false) << shard;
    EXPECT_TRUE(shard["in_bytes_per_s"].is_null()) << shard;  // one round
  }

  // --raw is the servers' own report, the memory line included.
  auto [raw_status, raw] = Ctl({"status", "--config", path, "--raw"});
  EXPECT_TRUE(ExitedSuccessfully(raw_status)) << raw;
  EXPECT_NE(raw.find("worker_clocks 3 0"), std::string::npos) << raw;
  EXPECT_NE(raw.find("memory rss_bytes "), std::string::npos) << raw;
  EXPECT_NE(raw.find(" values_bytes 8000\n"), std::string::npos) << raw;

  // The view asked nothing of the servers but STATS: no connection of its
  // own that a server would count as a failed handshake.
  EXPECT_NE(raw.find("failed_handshakes 0 "), std::string::npos) << raw;

  // One shard stopped: it is named, the other is still reported, exit 1.
  procs_[0]->Terminate(milliseconds(5000));  // shard 0's ps_server
  auto [one_status, one] = Ctl({"status", "--config", path});
  EXPECT_TRUE(WIFEXITED(one_status) && WEXITSTATUS(one_status) == 1) << one;
  EXPECT_NE(one.find("shard 0 at 127.0.0.1:" + std::to_string(ports[0]) +
                     ": not running (connection refused)"),
            std::string::npos)
      << one;
  EXPECT_EQ(one.find("shard 1 at"), std::string::npos) << one;
  EXPECT_NE(one.find("worker 1 is slowest: 3 clocks behind worker 0"), std::string::npos) << one;
}

TEST_F(PsCtlStatusTest, WatchPrintsRoundsWithByteRatesUntilSigintThenExitsZero) {
  const int port = FreePort();
  const std::string path = WriteJob({port});
  Start({kServer, "--config", path, "--shard", "0"}, /*capture=*/false);
  WaitForServers(path);
  Subprocess* watch = Start({kCtl, "status", "--config", path, "--json", "--watch", "0.2"});
  ASSERT_NE(watch, nullptr);
  // Two rounds, then Ctrl-C.
  std::vector<std::string> lines, got;
  LineReader reader;
  const auto deadline = Steady::now() + milliseconds(20000);
  while (got.size() < 2 && Steady::now() < deadline) {
    pollfd pfd{watch->output_fd(), POLLIN, 0};
    poll(&pfd, 1, 100);
    auto r = reader.ReadFrom(watch->output_fd(), &lines);
    ASSERT_OK(r);
    for (auto& l : lines) got.push_back(l);
    lines.clear();
    ASSERT_FALSE(*r) << "ps_ctl --watch ended by itself";
  }
  ASSERT_GE(got.size(), 2u);
  ASSERT_OK(watch->Signal(SIGINT));
  auto status = watch->WaitFor(milliseconds(10000));
  ASSERT_OK(status);
  EXPECT_TRUE(ExitedSuccessfully(*status)) << DescribeWaitStatus(*status);
  const nlohmann::json first = nlohmann::json::parse(got[0], nullptr, false);
  const nlohmann::json second = nlohmann::json::parse(got[1], nullptr, false);
  ASSERT_FALSE(first.is_discarded()) << got[0];
  ASSERT_FALSE(second.is_discarded()) << got[1];
  EXPECT_TRUE(first["shards"][0]["in_bytes_per_s"].is_null()) << got[0];
  // The STATS requests themselves move bytes: the second round has rates.
  EXPECT_TRUE(second["shards"][0]["in_bytes_per_s"].is_number()) << got[1];
  EXPECT_TRUE(second["interval_s"].is_number()) << got[1];
}

}  // namespace
}  // namespace ps
