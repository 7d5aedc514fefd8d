// replication.factor 2 under SIGKILLs: ps_launch runs 3 real ps_server
// shards, their backups and 2 workers (replica_pusher) that push integers
// under bsp, to a range table and to 5000 ids of a hashed table; the test
// SIGKILLs a server 10 times while they train, each time after the last
// one's replica has rejoined (its copy whole), so that every shard always
// has a copy to promote. ps_launch promotes or drops, and starts the dead
// one again as a backup that copies the shard (a hashed table's rows by
// id). At the end every row and id must hold the exact sum of every push:
// none lost, none applied twice. Under bsp with aggregation each clock's
// pushes wait in sums until the clock ends: replicated one by one, a
// rejoining replica copies the sums not applied yet (of the hashed table
// by id), and the test kills only primaries, so that each kill after a
// shard's first promotes a replica that joined with such a copy.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/config.h"
#include "tests/util/free_port.h"
#include "tools/launcher.h"

namespace ps {
namespace {

// The launcher's output as it comes, and what the test reads from it.
class Output {
 public:
  void Add(std::string_view line) {
    static const std::regex started(R"(^\[launch\] started (server [0-9]+( backup [0-9]+)?) \(pid ([0-9]+)\))");
    static const std::regex restarted(
        R"(^\[launch\] (server [0-9]+( backup [0-9]+)?) (killed|exited).*restarted it \(restart [0-9]+ of [0-9]+, pid ([0-9]+)\))");
    static const std::regex progress(R"(^\[worker [0-9]+\] clock ([0-9]+))");
    static const std::regex promoted(
        R"(^\[launch\] .*; (server [0-9]+( backup [0-9]+)?) is shard ([0-9]+)'s primary now)");
    static const std::regex copied(
        R"(primary's copy \([0-9]+ blocks and [0-9]+ pending sums, ([0-9]+) of them of hashed)");
    std::lock_guard<std::mutex> lock(mu_);
    lines_.emplace_back(line);
    std::cmatch m;
    const std::string text(line);
    if (std::regex_search(text.c_str(), m, started)) pids_[m[1]] = std::stoi(m[3]);
    if (std::regex_search(text.c_str(), m, restarted)) pids_[m[1]] = std::stoi(m[4]);
    if (std::regex_search(text.c_str(), m, progress)) clock_ = std::max<int64_t>(clock_, std::stoll(m[1]));
    if (text.find("is a full replica again") != std::string::npos &&
        text.find("holds every acknowledged entry") != std::string::npos) {
      ++rejoined_;
    }
    if (std::regex_search(text.c_str(), m, promoted)) {
      primaries_[std::stoul(m[3])] = m[1];
      ++counts_.failovers;
    }
    if (std::regex_search(text.c_str(), m, copied) && std::stoul(m[1]) > 0) {
      ++counts_.hashed_sum_copies;
    }
    changed_.notify_all();
  }
  // Waits up to `seconds` for `ready` (called under the lock).
  template <typename Pred>
  bool WaitFor(double seconds, Pred ready) {
    std::unique_lock<std::mutex> lock(mu_);
    return changed_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return ready(); });
  }
  std::map<std::string, int> pids() {
    std::lock_guard<std::mutex> lock(mu_);
    return pids_;
  }
  // Each shard's primary, by its launcher name.
  std::vector<std::string> primaries() {
    std::lock_guard<std::mutex> lock(mu_);
    return primaries_;
  }
  // Fail-overs (a backup promoted), and copies that held a pending sum of
  // a hashed table.
  struct Counts {
    uint32_t failovers = 0;
    uint32_t hashed_sum_copies = 0;
  };
  Counts counts() {
    std::lock_guard<std::mutex> lock(mu_);
    return counts_;
  }
  std::string Text() {
    std::lock_guard<std::mutex> lock(mu_);
    std::string all;
    for (const std::string& l : lines_) all += l + "\n";
    return all;
  }
  int64_t clock_ = 0;     // the highest clock a worker reported (under mu_)
  uint32_t rejoined_ = 0;  // replicas whose copy became whole (under mu_)

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::vector<std::string> lines_;
  std::map<std::string, int> pids_;  // the latest pid of every server child
  std::vector<std::string> primaries_ = {"server 0", "server 1", "server 2"};
  Counts counts_;
};

struct Mode {
  const char* name;
  bool aggregate;          // consistency.aggregate
  bool after_aggregation;  // replication.after_aggregation
  bool primaries_only;     // kill only the shards' primaries
};

// Plain bsp (every push replicated as it comes); bsp with aggregation and
// replication after aggregation (a clock's pushes reach the backups only as
// its sums, so a primary killed mid-clock leaves pushes that are
// acknowledged by nobody and sent again to the promoted backup); and bsp
// with aggregation and every push replicated (a rejoining replica copies
// the pending sums, and is promoted by the next kill of its shard).
class ReplicatedKillsTest : public ::testing::TestWithParam<Mode> {};

TEST_P(ReplicatedKillsTest, TenKillsOfServersLoseNoAcknowledgedPushAndDoubleNone) {
  const Mode mode = GetParam();
  const std::string dir = ::testing::TempDir() + "ps_replicated_kills_" + mode.name + "_" +
                          std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::vector<int> ports = {FreePort(), FreePort(), FreePort()};
  const uint32_t offset = FreePortOffset(ports, 2);
  ASSERT_NE(offset, 0u);
  const std::string config = dir + "/job.yaml";
  std::ofstream(config) << "cluster: { servers: [\"127.0.0.1:" << ports[0] << "\", \"127.0.0.1:"
                        << ports[1] << "\", \"127.0.0.1:" << ports[2] << "\"], workers: 2 }\n"
                        << "tables:\n  - { name: w, rows: 30000, dim: 1, optimizer: { type: add } }\n"
                        << "  - { name: h, keys: hashed, max_rows: 100000, optimizer: { type: add } }\n"
                        << "consistency: { mode: bsp"
                        << (mode.aggregate ? ", aggregate: true" : "") << " }\n"
                        << "client: { request_timeout_ms: 20000 }\n"
                        << "liveness: { server_down_timeout_ms: 20000, server_restarts: 10 }\n"
                        << "worker: { cpu_threads: 1 }\n"
                        << "replication: { factor: 2, port_offset: " << offset
                        << (mode.after_aggregation ? ", after_aggregation: true" : "") << " }\n";
  auto job = LoadJobFile(config);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const std::string stop_file = dir + "/stop";

  Output output;
  LauncherOptions options;
  options.bin_dir = std::string(PS_BINARY_DIR) + "/bin";
  options.worker_command = {std::string(PS_BINARY_DIR) + "/bin/replica_pusher", "--stop-file",
                            stop_file};
  options.handle_signals = false;
  options.grace = std::chrono::milliseconds(3000);
  options.output = [&](std::string_view line) { output.Add(line); };
  int exit_code = -1;
  std::thread launcher([&] {
    StatusOr<int> run = Launcher(*job, config, options).Run();
    exit_code = run.ok() ? *run : -1;
  });

  std::mt19937 random(20261202);
  int kills = 0;
  if (output.WaitFor(60, [&] { return output.clock_ >= 100; })) {
    for (; kills < 10; ++kills) {
      // A random server (or a random shard's primary), now that every
      // shard has two whole copies.
      std::map<std::string, int> pids = output.pids();
      auto it = pids.begin();
      if (mode.primaries_only) {
        const std::vector<std::string> primaries = output.primaries();
        it = pids.find(primaries[std::uniform_int_distribution<size_t>(0, 2)(random)]);
        ASSERT_NE(it, pids.end()) << "no pid for the primary " << output.Text();
      } else {
        std::advance(it, std::uniform_int_distribution<size_t>(0, pids.size() - 1)(random));
      }
      ASSERT_EQ(kill(it->second, SIGKILL), 0) << it->first;
      // Its replacement took a whole copy.
      const uint32_t want = static_cast<uint32_t>(kills + 1);
      if (!output.WaitFor(30, [&] { return output.rejoined_ >= want; })) {
        ADD_FAILURE() << "after killing " << it->first << " (kill " << want
                      << ") no replica rejoined within 30 s";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  // Every worker stops well ahead of where the fastest is now.
  int64_t stop = 0;
  output.WaitFor(0, [&] { stop = output.clock_ + 200; return true; });
  std::ofstream(stop_file) << stop << "\n";
  launcher.join();
  const std::string text = output.Text();
  // What happened, for the log: the kills, fail-overs, copies and the sums.
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("killed by signal") != std::string::npos ||
        line.find("full replica again") != std::string::npos ||
        line.find("took its primary's copy") != std::string::npos ||
        line.find("exact: ") != std::string::npos || line.find("job ") == 9) {
      std::printf("%s\n", line.substr(0, 200).c_str());
    }
  }
  EXPECT_EQ(kills, 10) << text;
  EXPECT_EQ(exit_code, 0) << text;
  for (const char* worker : {"[worker 0] exact: ", "[worker 1] exact: "}) {
    EXPECT_NE(text.find(worker), std::string::npos) << worker << "\n" << text;
  }
  if (mode.primaries_only) {
    // Every kill a fail-over, and replicas joined with pending sums of the
    // hashed table in their copies.
    EXPECT_EQ(output.counts().failovers, 10u) << text;
    EXPECT_GT(output.counts().hashed_sum_copies, 0u) << text;
  }
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Modes, ReplicatedKillsTest,
                         ::testing::Values(Mode{"bsp", false, false, false},
                                           Mode{"bsp_aggregate", true, true, false},
                                           Mode{"bsp_aggregate_per_push", true, false, true}),
                         [](const auto& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace ps
