// A real ps_server is killed with SIGKILL while it writes a checkpoint
// generation, at each point of CheckpointDir::Write (CheckpointStage,
// server/checkpoint.h) that ps_server's test hook PS_CHECKPOINT_TEST_STALL
// names (server/checkpoint_stall.h). After the kill the
// folder must show only complete generations (a torn one only ever under a
// .tmp name), and a restarted ps_server must restore the newest generation
// that was published before the kill, bit for bit, Adam's moments included;
// its next checkpoint removes the leftover .tmp.
//
// Every ps_server is a Subprocess, which kills and reaps it when the test
// ends, whatever happens.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <system_error>
#include <span>
#include <utility>
#include <vector>

#include "client/client.h"
#include "common/config.h"
#include "common/subprocess.h"
#include "common/watched_process.h"
#include "server/checkpoint.h"
#include "tests/util/free_port.h"
#include "tests/util/status_matchers.h"

namespace ps {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using Steady = std::chrono::steady_clock;

const std::string kServer = std::string(PS_BINARY_DIR) + "/bin/ps_server";

// Generous for a loaded 2-core machine; a healthy run takes well under a
// second for each wait.
constexpr milliseconds kLineTimeout(30000);

// The table: 50,000 rows of dim 4 make 13 run records (4096 rows each), so
// the `records` stage stops inside the table, and several write batches.
constexpr uint64_t kRows = 50000;
constexpr uint32_t kDim = 4;
constexpr size_t kFloats = kRows * kDim;
// A hashed table beside it (keys: hashed, dim kDim, adam): clock c pushes
// to the first kIdsPerClock * (c + 1) of kIds ids, so each generation
// holds more rows than the one before; its rows are records keyed by id.
constexpr size_t kIds = 6000;
constexpr size_t kIdsPerClock = 700;

const std::vector<uint64_t>& HashedIds() {
  static const std::vector<uint64_t> ids = [] {
    std::vector<uint64_t> out;
    for (uint64_t i = 0; i < kIds; ++i) out.push_back(i * 0x9e3779b97f4a7c15ull + 12345);
    return out;
  }();
  return ids;
}

// One ps_server child whose merged stdout and stderr the test reads.
class ServerProcess {
 public:
  // Starts ps_server for shard 0 of `job` with PS_CHECKPOINT_TEST_STALL set
  // to `stall` (empty: the hook is off, whatever the test's environment
  // holds).
  static std::unique_ptr<ServerProcess> Start(const std::string& job, const std::string& stall) {
    auto p = WatchedProcess::Start({.argv = {kServer, "--config", job, "--shard", "0"},
                                    .env = {{"PS_CHECKPOINT_TEST_STALL", stall}}});
    EXPECT_OK(p);
    if (!p.ok()) return nullptr;
    return std::unique_ptr<ServerProcess>(new ServerProcess(std::move(*p)));
  }

  // Waits until the output holds `needle`, the output ends (the server
  // exited) or `timeout` passes. True when found.
  bool WaitFor(const std::string& needle, milliseconds timeout) {
    return process_->WaitForLine(needle, timeout).ok();
  }

  // SIGKILL, then reap. Returns the wait status.
  int Kill() {
    EXPECT_OK(process_->Signal(SIGKILL));
    auto status = process_->WaitFor(milliseconds(10000));
    EXPECT_OK(status) << "ps_server did not die of SIGKILL within 10 s";
    process_->WaitForEnd(milliseconds(1000));
    return status.ok() ? *status : -1;
  }

  // Waits up to `timeout` for the server to exit on its own (after
  // SHUTDOWN), reading its output to the end. Returns the wait status.
  StatusOr<int> Exit(milliseconds timeout) {
    const auto deadline = Steady::now() + timeout;
    process_->WaitForEnd(timeout);
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Steady::now());
    return process_->WaitFor(std::max(left, milliseconds(0)));
  }

  // Everything read so far.
  std::string output() const { return process_->Output(); }

 private:
  explicit ServerProcess(std::unique_ptr<WatchedProcess> p) : process_(std::move(p)) {}

  std::unique_ptr<WatchedProcess> process_;
};

// The gradient worker 0 pushes at `clock`: varied, small, finite.
std::vector<float> Gradient(int64_t clock) {
  std::vector<float> g(kFloats);
  for (size_t i = 0; i < kFloats; ++i) {
    const int64_t k = static_cast<int64_t>((i * 7 + static_cast<size_t>(clock) * 13) % 17) - 8;
    g[i] = 0.01f * static_cast<float>(k) + 0.001f * static_cast<float>(clock + 1);
  }
  return g;
}

// The dense table's part of what PullAll reads.
std::vector<float> Dense(const std::vector<float>& all) {
  return std::vector<float>(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(kFloats));
}

// The rows the hashed table holds at the start of `clock`: every id pushed
// by the clocks before it.
size_t HashedRowsAt(int64_t clock) {
  return std::min(kIds, kIdsPerClock * static_cast<size_t>(clock));
}

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The first element where a and b differ in their bits, for messages.
std::string FirstDifference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) {
    return std::to_string(a.size()) + " values against " + std::to_string(b.size());
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      return "row " + std::to_string(i / kDim) + " column " + std::to_string(i % kDim) + ": " +
             std::to_string(a[i]) + " against " + std::to_string(b[i]);
    }
  }
  return "none";
}

// The dense table's values, then the hashed table's at every id (those
// without a row read as their initial value).
Status PullAll(Client* client, std::vector<float>* out) {
  out->assign(kFloats + kIds * kDim, 0.0f);
  PS_ASSIGN_OR_RETURN(Ticket t, client->PullDense(0, out->data()));
  PS_ASSIGN_OR_RETURN(Ticket h, client->Pull(1, HashedIds(), out->data() + kFloats));
  PS_RETURN_IF_ERROR(client->Wait(t));
  return client->Wait(h);
}

// One step of worker 0 at its current clock: push that clock's gradients,
// then end the clock.
Status Step(Client* client) {
  const int64_t at = client->clock();
  PS_ASSIGN_OR_RETURN(Ticket push, client->PushDense(0, SharedFloats::Take(Gradient(at))));
  const size_t n = std::min(kIds, kIdsPerClock * static_cast<size_t>(at + 1));
  std::vector<float> g = Gradient(at);
  g.resize(n * kDim);
  const std::span<const uint64_t> ids(HashedIds().data(), n);
  PS_ASSIGN_OR_RETURN(Ticket hashed, client->Push(1, ids, SharedFloats::Take(std::move(g))));
  PS_RETURN_IF_ERROR(client->Wait(push));
  PS_RETURN_IF_ERROR(client->Wait(hashed));
  PS_ASSIGN_OR_RETURN(Ticket clock, client->Clock());
  return client->Wait(clock);
}

// What a kill at one stage must leave behind.
struct Case {
  const char* stage;
  // The generation whose write is killed (PS_CHECKPOINT_TEST_STALL's clock).
  int64_t stall_clock;
  // The generation a restarted server must restore: the newest published.
  int64_t restored_clock;
  // The complete generations in the folder after the kill.
  std::vector<int64_t> complete;
  // The .tmp folder the kill leaves, "" for none.
  const char* torn;
  // Whether that folder already holds every record (the database was
  // closed before the kill), so only its name keeps it from being read.
  bool torn_holds_every_record;
};

// For gtest's messages: the stage and the generation killed.
void PrintTo(const Case& c, std::ostream* os) { *os << c.stage << ":" << c.stall_clock; }

// every_clocks 2, keep 2: generations 2 and 4 are written whole before the
// one of clock 6, whose write prunes generation 2.
const Case kCases[] = {
    {"created", 4, 2, {2}, "gen-4.tmp", false},
    {"records", 4, 2, {2}, "gen-4.tmp", false},
    {"flushed", 4, 2, {2}, "gen-4.tmp", true},
    {"synced", 4, 2, {2}, "gen-4.tmp", true},
    {"published", 4, 4, {2, 4}, "", false},
    {"pruning", 6, 6, {4, 6}, "gen-2.tmp", true},
};

class CheckpointCrashTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');
    dir_ = fs::temp_directory_path() /
           ("ps_checkpoint_crash_" + std::to_string(getpid()) + "_" + name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    shard_dir_ = ShardCheckpointDir((dir_ / "ckpt").string(), 0);
  }
  void TearDown() override {
    // Kept for a look when the test failed.
    if (HasFailure()) {
      std::printf("checkpoint folder kept at %s\n", dir_.c_str());
    } else {
      fs::remove_all(dir_);
    }
  }

  // Writes the job (1 shard on a fresh port, 1 worker) and loads it.
  void WriteJob() {
    job_path_ = (dir_ / "job.yaml").string();
    std::ofstream(job_path_)
        << "cluster: { servers: [\"127.0.0.1:" << FreePort() << "\"], workers: 1 }\n"
        << "tables:\n"
        << "  - { name: w, rows: " << kRows << ", dim: " << kDim
        << ", init: { type: normal, stddev: 0.1, seed: 7 },\n"
        << "      optimizer: { type: adam, lr: 0.01 } }\n"
        << "  - { name: h, keys: hashed, max_rows: 100000, dim: " << kDim
        << ", init: { type: uniform, scale: 0.1, seed: 9 },\n"
        << "      optimizer: { type: adam, lr: 0.01 } }\n"
        << "consistency: { mode: bsp }\n"
        // No heartbeats: the test's pauses never make the worker dead.
        << "liveness: { heartbeat_ms: 0 }\n"
        << "client: { request_timeout_ms: 20000 }\n"
        << "checkpoint: { dir: " << (dir_ / "ckpt").string() << ", every_clocks: 2, keep: 2 }\n";
    auto job = LoadJobFile(job_path_);
    ASSERT_OK(job);
    job_ = *job;
  }

  // Checks that the folder holds exactly the complete generations
  // `complete`, each reading back whole, and the .tmp folders `torn`; a
  // restore picks the newest of Generations().
  void ExpectFolder(const std::vector<int64_t>& complete, const std::vector<std::string>& torn,
                    const std::string& when) {
    SCOPED_TRACE(when);
    auto dir = CheckpointDir::Open(shard_dir_);
    ASSERT_OK(dir);
    std::vector<int64_t> seen;
    std::vector<std::string> seen_tmp;
    for (const auto& entry : fs::directory_iterator(shard_dir_)) {
      const std::string name = entry.path().filename().string();
      if (name.size() > 4 && name.ends_with(".tmp")) {
        seen_tmp.push_back(name);
        continue;
      }
      ASSERT_TRUE(name.starts_with("gen-")) << shard_dir_ << " holds an unexpected " << name;
      const int64_t clock = std::stoll(name.substr(4));
      seen.push_back(clock);
      // The visible generation must be whole: a restore would pick it.
      auto read = (*dir)->Read(clock);
      EXPECT_OK(read) << shard_dir_ << "/" << name
                             << " is visible but torn: " << read.status().ToString();
    }
    std::sort(seen.begin(), seen.end());
    std::sort(seen_tmp.begin(), seen_tmp.end());
    ASSERT_EQ(seen, complete) << "complete generations in " << shard_dir_;
    ASSERT_EQ(seen_tmp, torn) << ".tmp folders in " << shard_dir_;
    auto generations = (*dir)->Generations();
    ASSERT_OK(generations);
    ASSERT_EQ(*generations, complete) << "what a restore chooses from";
  }

  fs::path dir_;
  std::string shard_dir_;
  std::string job_path_;
  JobOptions job_;
};

class CheckpointCrashStageTest : public CheckpointCrashTest,
                                 public ::testing::WithParamInterface<Case> {};

TEST_P(CheckpointCrashStageTest, SigkillLeavesNoTornGenerationAndRestartRestoresTheLastPublished) {
  const Case& c = GetParam();
  ASSERT_NO_FATAL_FAILURE(WriteJob());
  const std::string stall = std::string(c.stage) + ":" + std::to_string(c.stall_clock);

  // Run 1: worker 0 pulls the whole table at the start of every clock (under
  // bsp with one worker that is exactly the state a generation of that clock
  // holds), pushes, and ends the clock, up to one clock past the stalled
  // generation (not to the next boundary: that would wait for the stalled
  // write).
  std::map<int64_t, std::vector<float>> state;
  {
    std::unique_ptr<ServerProcess> server = ServerProcess::Start(job_path_, stall);
    ASSERT_NE(server, nullptr);
    {
      auto client = Client::Create(job_, 0);
      ASSERT_OK(client);
      Status joined = (*client)->Join();
      ASSERT_OK(joined) << "\n" << server->output();
      for (int64_t clock = 0; clock <= c.stall_clock + 1; ++clock) {
        ASSERT_EQ((*client)->clock(), clock);
        Status pulled = PullAll(client->get(), &state[clock]);
        ASSERT_OK(pulled) << "clock " << clock << ": " << pulled.ToString() << "\n"
                                 << server->output();
        if (clock == c.stall_clock + 1) break;
        Status stepped = Step(client->get());
        ASSERT_OK(stepped) << "clock " << clock << ": " << stepped.ToString() << "\n"
                                  << server->output();
      }
    }
    const std::string line =
        "checkpoint: stalled at " + std::string(c.stage) + " writing gen-" +
        std::to_string(c.stall_clock) + " in " + shard_dir_ + " (PS_CHECKPOINT_TEST_STALL)";
    ASSERT_TRUE(server->WaitFor(line, kLineTimeout))
        << "no line \"" << line << "\" within " << kLineTimeout.count() << " ms; output:\n"
        << server->output();
    const int status = server->Kill();
    // Killed by the test, not gone on its own before.
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << DescribeWaitStatus(status) << "\n" << server->output();
  }
  // Restoring the wrong generation must show in the values too.
  ASSERT_FALSE(BitEqual(state.at(c.restored_clock), state.at(c.restored_clock == 2 ? 4 : 2)));

  // The folder: only complete generations are visible; the torn write (or
  // the generation being pruned) is only under a .tmp name.
  std::vector<std::string> torn;
  if (*c.torn != '\0') torn.push_back(c.torn);
  ASSERT_NO_FATAL_FAILURE(ExpectFolder(c.complete, torn, "after the kill at " + stall));
  if (!torn.empty()) {
    // What is in the .tmp folder is what the stage says: read through a
    // copy under a complete name (the original stays for the restart).
    const std::string name = torn[0];
    const int64_t torn_clock = std::stoll(name.substr(4, name.size() - 4 - 4));
    const fs::path scratch = dir_ / "torn";
    std::error_code ec;
    fs::create_directories(scratch, ec);
    ASSERT_FALSE(ec) << scratch << ": " << ec.message();
    fs::copy(fs::path(shard_dir_) / name, scratch / ("gen-" + std::to_string(torn_clock)),
             fs::copy_options::recursive, ec);
    ASSERT_FALSE(ec) << "cannot copy " << name << ": " << ec.message();
    auto copy = CheckpointDir::Open(scratch.string());
    ASSERT_OK(copy);
    auto read = (*copy)->Read(torn_clock);
    if (c.torn_holds_every_record) {
      ASSERT_OK(read) << name << ": " << read.status().ToString();
      EXPECT_TRUE(BitEqual(read->tables[0].values, Dense(state.at(torn_clock))))
          << name << ": "
          << FirstDifference(read->tables[0].values, Dense(state.at(torn_clock)));
      EXPECT_EQ(read->tables[1].ids.size(), HashedRowsAt(torn_clock)) << name;
    } else {
      EXPECT_FALSE(read.ok()) << name << " holds a complete generation after a kill at " << stall
                              << ": the hook stopped later than its stage says";
    }
  }
  auto saved = CheckpointDir::Open(shard_dir_).value()->Read(c.restored_clock);
  ASSERT_OK(saved);
  ASSERT_EQ(saved->tables.size(), 2u);
  EXPECT_EQ(saved->tables[0].slots.size(), 2u);  // Adam's two moments
  EXPECT_TRUE(BitEqual(saved->tables[0].values, Dense(state.at(c.restored_clock))))
      << FirstDifference(saved->tables[0].values, Dense(state.at(c.restored_clock)));
  // The hashed table: a row for every id pushed before the generation's
  // clock, each a record of its id (the values are compared after the
  // restart, through pulls).
  EXPECT_TRUE(saved->tables[1].hashed);
  EXPECT_EQ(saved->tables[1].ids.size(), HashedRowsAt(c.restored_clock));
  EXPECT_EQ(saved->tables[1].slots.size(), 2u);

  // Run 2, with the hook off: the server restores the newest published
  // generation and worker 0 resumes at its clock.
  std::unique_ptr<ServerProcess> server = ServerProcess::Start(job_path_, "");
  ASSERT_NE(server, nullptr);
  auto client = Client::Create(job_, 0);
  ASSERT_OK(client);
  Status joined = (*client)->Join();
  ASSERT_OK(joined) << "\n" << server->output();
  const std::string restored =
      "restored " + shard_dir_ + "/gen-" + std::to_string(c.restored_clock);
  EXPECT_TRUE(server->WaitFor(restored, kLineTimeout))
      << "no \"" << restored << "\"; output:\n" << server->output();
  ASSERT_EQ((*client)->clock(), c.restored_clock) << server->output();
  std::vector<float> values;
  Status pulled = PullAll(client->get(), &values);
  ASSERT_OK(pulled) << "\n" << server->output();
  EXPECT_TRUE(BitEqual(values, state.at(c.restored_clock)))
      << "restored values differ from the job's at clock " << c.restored_clock << ": "
      << FirstDifference(values, state.at(c.restored_clock));

  // The same step as in run 1 gives the same values bit for bit only if
  // Adam's moments were restored exactly too.
  Status stepped = Step(client->get());
  ASSERT_OK(stepped) << "\n" << server->output();
  pulled = PullAll(client->get(), &values);
  ASSERT_OK(pulled) << "\n" << server->output();
  EXPECT_TRUE(BitEqual(values, state.at(c.restored_clock + 1)))
      << "one step after the restore the values differ from run 1's at clock "
      << c.restored_clock + 1 << ": " << FirstDifference(values, state.at(c.restored_clock + 1));

  // The next boundary writes a generation, and that write removes the
  // leftover .tmp.
  stepped = Step(client->get());
  ASSERT_OK(stepped) << "\n" << server->output();
  const int64_t next = c.restored_clock + 2;
  const std::string written = "checkpoint of clock " + std::to_string(next) + " written";
  ASSERT_TRUE(server->WaitFor(written, kLineTimeout))
      << "no \"" << written << "\"; output:\n" << server->output();
  ASSERT_NO_FATAL_FAILURE(ExpectFolder({c.restored_clock, next}, {}, "after the next checkpoint"));

  Status shutdown = (*client)->ShutdownServers();
  EXPECT_OK(shutdown);
  auto exited = server->Exit(kLineTimeout);
  ASSERT_OK(exited) << "\n" << server->output();
  EXPECT_TRUE(ExitedSuccessfully(*exited)) << DescribeWaitStatus(*exited) << "\n"
                                           << server->output();
}

INSTANTIATE_TEST_SUITE_P(EveryStage, CheckpointCrashStageTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& param) {
                           return std::string(param.param.stage);
                         });

// A value the hook cannot parse must not freeze a job: it is reported once
// and every checkpoint is written.
struct BadValue {
  const char* name;
  const char* value;
};

void PrintTo(const BadValue& v, std::ostream* os) { *os << '"' << v.value << '"'; }

class CheckpointCrashBadValueTest : public CheckpointCrashTest,
                                    public ::testing::WithParamInterface<BadValue> {};

TEST_P(CheckpointCrashBadValueTest, IsReportedAndIgnored) {
  ASSERT_NO_FATAL_FAILURE(WriteJob());
  const std::string value = GetParam().value;
  std::unique_ptr<ServerProcess> server = ServerProcess::Start(job_path_, value);
  ASSERT_NE(server, nullptr);
  auto client = Client::Create(job_, 0);
  ASSERT_OK(client);
  for (int i = 0; i < 4; ++i) {
    Status stepped = Step(client->get());
    ASSERT_OK(stepped) << "\n" << server->output();
  }
  const std::string warning = "PS_CHECKPOINT_TEST_STALL=\"" + value + "\" ignored";
  for (const std::string& line : {warning, std::string("checkpoint of clock 4 written")}) {
    ASSERT_TRUE(server->WaitFor(line, kLineTimeout))
        << "no \"" << line << "\"; output:\n" << server->output();
  }
  const std::string& out = server->output();
  EXPECT_EQ(out.find(warning), out.rfind(warning)) << "reported more than once:\n" << out;
  EXPECT_EQ(out.find("stalled at"), std::string::npos) << out;
  ASSERT_NO_FATAL_FAILURE(ExpectFolder({2, 4}, {}, "after two generations"));
  EXPECT_OK((*client)->ShutdownServers());
  auto exited = server->Exit(kLineTimeout);
  ASSERT_OK(exited) << "\n" << server->output();
  EXPECT_TRUE(ExitedSuccessfully(*exited)) << DescribeWaitStatus(*exited) << "\n" << out;
}

INSTANTIATE_TEST_SUITE_P(Values, CheckpointCrashBadValueTest,
                         ::testing::Values(BadValue{"NoClock", "records"},
                                           BadValue{"UnknownStage", "torn:2"},
                                           BadValue{"ClockNotANumber", "records:two"},
                                           BadValue{"NegativeClock", "records:-1"}),
                         [](const ::testing::TestParamInfo<BadValue>& param) {
                           return std::string(param.param.name);
                         });

}  // namespace
}  // namespace ps
