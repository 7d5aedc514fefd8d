// What ps_ctl status shows (tools/ctl_status.h): the job's view from one or two rounds, the page and the JSON,
// and the TCP probe (tools/tcp_probe.h).
#include "tools/ctl_status.h"

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "tests/util/example_stats.h"
#include "tests/util/free_port.h"
#include "tests/util/status_matchers.h"
#include "tools/tcp_probe.h"

namespace ps {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// Shard 1's report: as the example, with worker 1 training, no backup
// workers and no failure.
ShardStats Report1() {
  ShardStats s = ExampleShardStats();
  s.workers[1].dead = false;
  s.backup_workers.reset();
  s.failed.clear();
  return s;
}

// Shard 0's report of the same moment: it heard less recently from worker
// 0, and no worker said its target; no checkpoints, no resident size.
ShardStats Report0() {
  ShardStats s;
  s.shard = 0;
  s.endpoint = "tcp://127.0.0.1:40001";
  s.uptime_s = 12.4;
  s.pushes = 500;
  s.pulls = 10;
  s.bytes_in = 1000000;
  s.bytes_out = 3000000;
  s.consistency = "staleness 3";
  s.min_clock = 48;
  s.workers = {ExampleWorker(59, 0, 500), ExampleWorker(48, 0, 2500), ExampleWorker(61, 0, 30)};
  s.workers[2].left = true;
  s.pushes_per_s = 80;
  s.pulls_per_s = 4.5;
  s.evaluator = ShardStats::Evaluator{"reading", 90};
  return s;
}

JobOptions TwoShardJob() {
  JobOptions job;
  job.source = "job.yaml";
  job.cluster.servers = {"127.0.0.1:40001", "127.0.0.1:40002"};
  job.cluster.workers = 3;
  job.consistency.mode = ConsistencyMode::kSsp;
  job.consistency.staleness = 3;
  return job;
}

ShardSample Sample(uint32_t shard, const ShardStats& stats,
                   std::chrono::steady_clock::time_point taken) {
  ShardSample s;
  s.shard = shard;
  s.address = "127.0.0.1:4000" + std::to_string(shard + 1);
  s.stats = stats;
  s.taken = taken;
  return s;
}

// Report1() with its byte counters replaced.
ShardStats WithBytes(uint64_t in, uint64_t out, double uptime_s = 14.5) {
  ShardStats s = Report1();
  s.bytes_in = in;
  s.bytes_out = out;
  s.uptime_s = uptime_s;
  return s;
}

TEST(BuildJobViewTest, WorkerClockIsTheLeastOverShardsAndTheSlowestTrainingWorkerIsNamed) {
  const auto t = std::chrono::steady_clock::now();
  const std::vector<ShardSample> now = {Sample(0, Report0(), t), Sample(1, Report1(), t)};
  const JobView view = BuildJobView(TwoShardJob(), now, {});
  EXPECT_EQ(view.consistency, "ssp 3");
  EXPECT_TRUE(view.all_answered);
  ASSERT_EQ(view.workers_rows.size(), 3u);
  EXPECT_EQ(view.workers_rows[0].clock, 59);  // shard 0 holds 59, shard 1 60
  EXPECT_EQ(view.workers_rows[1].clock, 48);
  EXPECT_EQ(view.workers_rows[2].clock, 61);
  EXPECT_EQ(view.workers_rows[0].behind, 2);
  EXPECT_EQ(view.workers_rows[1].behind, 13);
  EXPECT_EQ(view.workers_rows[2].behind, 0);
  // Shard 1 heard workers 0 and 1 say they train to 100; shard 0's report
  // has no targets (an older server), and worker 2 said none.
  EXPECT_EQ(view.workers_rows[0].target, 100);
  EXPECT_EQ(view.workers_rows[1].target, 100);
  EXPECT_EQ(view.workers_rows[2].target, 0);
  EXPECT_DOUBLE_EQ(*view.workers_rows[0].silent_s, 0.012);  // the least over shards
  EXPECT_DOUBLE_EQ(*view.workers_rows[1].silent_s, 2.3);
  EXPECT_EQ(view.workers_rows[0].state, WorkerState::kTraining);
  EXPECT_EQ(view.workers_rows[2].state, WorkerState::kLeft);
  ASSERT_TRUE(view.slowest.has_value());
  EXPECT_EQ(*view.slowest, 1u);
  EXPECT_EQ(*view.fastest, 2u);  // a worker that left at the end leads
  EXPECT_EQ(view.slowest_behind, 13);
  ASSERT_EQ(view.shard_rows.size(), 2u);
  EXPECT_DOUBLE_EQ(view.shard_rows[1].requests_per_s, 120.5);
  EXPECT_EQ(view.shard_rows[1].waiting_pulls, 2u);
  EXPECT_FALSE(view.shard_rows[1].in_bytes_per_s.has_value());  // one round
  EXPECT_FALSE(view.interval_s.has_value());

  const std::string page = FormatJobView(view);
  EXPECT_NE(page.find("worker 1 is slowest: 13 clocks behind worker 2"), std::string::npos) << page;
  EXPECT_NE(page.find("job job.yaml: 3 workers, 2 shards, consistency ssp 3"), std::string::npos)
      << page;
  EXPECT_NE(page.find("MB/s needs two samples"), std::string::npos) << page;
  EXPECT_NE(page.find("clock 40, writing"), std::string::npos) << page;
  EXPECT_NE(page.find("2.3 s"), std::string::npos) << page;
  EXPECT_NE(page.find("of: the worker's train.iterations"), std::string::npos) << page;
  EXPECT_EQ(view.evaluator_state, "reading");
  EXPECT_DOUBLE_EQ(*view.evaluator_silent_s, 0.09);  // the most recent hearing
  EXPECT_NE(page.find("evaluator: reading, last heard 0.1 s ago"), std::string::npos) << page;
  // A shard that saw it leave (or die) says so, whatever the others say.
  ShardStats left_report = Report1();
  left_report.evaluator->state = "left";
  const std::vector<ShardSample> later = {Sample(0, Report0(), t), Sample(1, left_report, t)};
  EXPECT_EQ(BuildJobView(TwoShardJob(), later, {}).evaluator_state, "left");
  // Worker 1 at clock 48 of 100; worker 2 said no target.
  EXPECT_NE(page.find(" 48  100 "), std::string::npos) << page;
  EXPECT_NE(page.find(" 61    - "), std::string::npos) << page;
}

TEST(BuildJobViewTest, ByteRatesComeFromTwoRounds) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto t1 = t0 + seconds(2);
  const std::vector<ShardSample> before = {Sample(1, Report1(), t0)};
  // 4 MB more in and 1 MB more out over 2 s.
  const std::vector<ShardSample> now = {Sample(1, WithBytes(8000000, 3000000), t1)};
  const JobView view = BuildJobView(TwoShardJob(), now, before);
  ASSERT_EQ(view.shard_rows.size(), 1u);
  ASSERT_TRUE(view.shard_rows[0].in_bytes_per_s.has_value());
  EXPECT_DOUBLE_EQ(*view.shard_rows[0].in_bytes_per_s, 2e6);
  EXPECT_DOUBLE_EQ(*view.shard_rows[0].out_bytes_per_s, 0.5e6);
  EXPECT_DOUBLE_EQ(*view.interval_s, 2.0);
  const std::string page = FormatJobView(view);
  EXPECT_NE(page.find("2.00"), std::string::npos) << page;
  EXPECT_NE(page.find("0.50"), std::string::npos) << page;
  EXPECT_NE(page.find("MB/s over the last 2.0 s"), std::string::npos) << page;
}

TEST(BuildJobViewTest, NoByteRateAcrossAServerRestart) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<ShardSample> before = {Sample(1, Report1(), t0)};
  const std::vector<ShardSample> now = {Sample(1, WithBytes(100, 100, 0.5), t0 + seconds(2))};
  const JobView view = BuildJobView(TwoShardJob(), now, before);
  EXPECT_FALSE(view.shard_rows[0].in_bytes_per_s.has_value());
  EXPECT_FALSE(view.shard_rows[0].out_bytes_per_s.has_value());
}

TEST(BuildJobViewTest, AShardThatDidNotAnswerIsNamedAndTheOthersStillCount) {
  const auto t = std::chrono::steady_clock::now();
  ShardSample down;
  down.shard = 0;
  down.address = "127.0.0.1:40001";
  down.problem = "not running (connection refused)";
  const std::vector<ShardSample> now = {down, Sample(1, Report1(), t)};
  const JobView view = BuildJobView(TwoShardJob(), now, {});
  EXPECT_FALSE(view.all_answered);
  ASSERT_EQ(view.workers_rows.size(), 3u);
  EXPECT_EQ(view.workers_rows[0].clock, 60);  // from shard 1 alone
  const std::string page = FormatJobView(view);
  EXPECT_NE(page.find("shard 0 at 127.0.0.1:40001: not running (connection refused)"),
            std::string::npos)
      << page;
}

TEST(BuildJobViewTest, DeadWorkersAreNotTheSlowest) {
  ShardStats text = Report1();
  text.workers[1].dead = true;
  const JobView view =
      BuildJobView(TwoShardJob(), std::vector<ShardSample>{Sample(1, text, {})}, {});
  EXPECT_EQ(view.workers_rows[1].state, WorkerState::kDead);
  ASSERT_TRUE(view.slowest.has_value());
  EXPECT_EQ(*view.slowest, 0u);
  EXPECT_EQ(view.slowest_behind, 1);
  EXPECT_NE(FormatJobView(view).find("worker 0 is slowest: 1 clock behind worker 2"),
            std::string::npos);
}

TEST(BuildJobViewTest, AWorkerNoShardHeardFromYetIsStartingAndMayBeTheSlowest) {
  // Within the start-up grace the server reports a negative silence.
  ShardStats text = Report1();
  text.workers[1].silent_ms = -5000;
  const JobView view =
      BuildJobView(TwoShardJob(), std::vector<ShardSample>{Sample(1, text, {})}, {});
  EXPECT_EQ(view.workers_rows[1].state, WorkerState::kStarting);
  EXPECT_FALSE(view.workers_rows[1].silent_s.has_value());
  ASSERT_TRUE(view.slowest.has_value());
  EXPECT_EQ(*view.slowest, 1u);
  const std::string page = FormatJobView(view);
  EXPECT_NE(page.find("starting"), std::string::npos) << page;
}

TEST(BuildJobViewTest, BackupWorkersShowEachWorkersLatePushesSummedOverShards) {
  const auto t = std::chrono::steady_clock::now();
  // Without backup workers no shard reports them: no column, null in JSON.
  const std::vector<ShardSample> before = {Sample(0, Report0(), t), Sample(1, Report1(), t)};
  const JobView plain = BuildJobView(TwoShardJob(), before, {});
  EXPECT_FALSE(plain.workers_rows[1].late_pushes.has_value());
  EXPECT_EQ(FormatJobView(plain).find("late pushes"), std::string::npos);
  ShardStats r0 = Report0(), r1 = Report1();
  r0.backup_workers = ShardStats::BackupWorkers{1, 2, 9};
  r1.backup_workers = ShardStats::BackupWorkers{1, 2, 12};
  for (uint32_t w = 0; w < 3; ++w) {
    r0.workers[w].late_pushes = std::vector<uint64_t>{0, 9, 0}[w];
    r1.workers[w].late_pushes = std::vector<uint64_t>{1, 11, 0}[w];
  }
  const std::vector<ShardSample> now = {Sample(0, r0, t), Sample(1, r1, t)};
  const JobView view = BuildJobView(TwoShardJob(), now, {});
  EXPECT_EQ(view.workers_rows[0].late_pushes, 1);
  EXPECT_EQ(view.workers_rows[1].late_pushes, 20);
  EXPECT_EQ(view.workers_rows[2].late_pushes, 0);
  const std::string page = FormatJobView(view);
  EXPECT_NE(page.find("late pushes"), std::string::npos) << page;
  EXPECT_NE(page.find("   20 "), std::string::npos) << page;
  const nlohmann::json j = nlohmann::json::parse(JobViewJson(view), nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["workers"][1]["late_pushes"], 20);
  EXPECT_TRUE(nlohmann::json::parse(JobViewJson(plain))["workers"][1]["late_pushes"].is_null());
}

TEST(BuildJobViewTest, HashedTablesShowEachShardsRowsAgainstItsBound) {
  const auto t = std::chrono::steady_clock::now();
  const std::vector<ShardSample> plain_samples = {Sample(0, Report0(), t), Sample(1, Report1(), t)};
  EXPECT_EQ(FormatJobView(BuildJobView(TwoShardJob(), plain_samples, {})).find("hashed table"),
            std::string::npos);
  ShardStats r0 = Report0(), r1 = Report1();
  ShardStats::Table emb{.name = "emb", .dim = 8, .owned_begin = 0, .owned_end = 2048};
  emb.keys = "hashed";
  emb.stored_rows = 1000;
  emb.max_rows = 5000;
  emb.stored_bytes = 3 * 1024 * 1024;
  r0.tables.push_back(emb);
  emb.stored_rows = 5000;
  emb.dropped_rows = 77;
  emb.unadmitted_rows = 12;
  emb.evicted_rows = 4321;
  emb.expired_rows = 987;
  r1.tables.push_back(emb);
  const std::vector<ShardSample> now = {Sample(0, r0, t), Sample(1, r1, t)};
  const JobView view = BuildJobView(TwoShardJob(), now, {});
  const std::string page = FormatJobView(view);
  EXPECT_NE(page.find("hashed table"), std::string::npos) << page;
  EXPECT_NE(page.find("emb               1  5000      5000  3.0       77          12"),
            std::string::npos)
      << page;
  const nlohmann::json j = nlohmann::json::parse(JobViewJson(view), nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  // Then the rows evicted at the bound and for idleness.
  const size_t line = page.find("emb               1  5000");
  ASSERT_NE(line, std::string::npos) << page;
  const std::string row = page.substr(line, page.find('\n', line) - line);
  EXPECT_NE(row.find("12     4321      987"), std::string::npos) << row;
  EXPECT_EQ(j["shards"][1]["stats"]["tables"].back()["dropped_rows"], 77);
  EXPECT_EQ(j["shards"][1]["stats"]["tables"].back()["evicted_rows"], 4321);
  EXPECT_EQ(j["shards"][1]["stats"]["tables"].back()["expired_rows"], 987);
  EXPECT_EQ(j["shards"][1]["stats"]["tables"].back()["keys"], "hashed");
}

TEST(JobViewJsonTest, CarriesTheSameFactsInBaseUnits) {
  const auto t0 = std::chrono::steady_clock::now();
  ShardSample down;
  down.shard = 0;
  down.address = "127.0.0.1:40001";
  down.problem = "not running (connection refused)";
  const std::vector<ShardSample> before = {Sample(1, Report1(), t0)};
  const std::vector<ShardSample> now = {down,
                                        Sample(1, WithBytes(8000000, 3000000), t0 + seconds(2))};
  JobOptions job = TwoShardJob();
  job.source = "dir/\"quoted\"\\job.yaml";  // escaped in the JSON
  const std::string text = JobViewJson(BuildJobView(job, now, before));
  EXPECT_EQ(text.find('\n'), std::string::npos) << "one line";
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << text;
  EXPECT_EQ(j["job"]["config"], "dir/\"quoted\"\\job.yaml");
  EXPECT_EQ(j["job"]["workers"], 3);
  EXPECT_EQ(j["job"]["shards"], 2);
  EXPECT_EQ(j["job"]["consistency"], "ssp 3");
  EXPECT_EQ(j["job"]["replication_factor"], 1);
  EXPECT_TRUE(j["job"]["steps"].is_null());
  EXPECT_EQ(j["all_answered"], false);
  EXPECT_DOUBLE_EQ(j["interval_s"].get<double>(), 2.0);
  ASSERT_EQ(j["workers"].size(), 3u);
  EXPECT_EQ(j["workers"][1]["worker"], 1);
  EXPECT_EQ(j["workers"][1]["clock"], 48);
  EXPECT_EQ(j["workers"][1]["target"], 100);
  EXPECT_EQ(j["evaluator"]["state"], "reading");
  EXPECT_TRUE(j["workers"][2]["target"].is_null());
  EXPECT_EQ(j["workers"][1]["behind"], 13);
  EXPECT_DOUBLE_EQ(j["workers"][1]["silent_s"].get<double>(), 2.3);
  EXPECT_EQ(j["workers"][1]["state"], "training");
  EXPECT_EQ(j["workers"][2]["state"], "left");
  EXPECT_EQ(j["slowest"]["worker"], 1);
  EXPECT_EQ(j["slowest"]["behind"], 13);
  EXPECT_EQ(j["slowest"]["fastest"], 2);
  ASSERT_EQ(j["shards"].size(), 2u);
  EXPECT_EQ(j["shards"][0]["answered"], false);
  EXPECT_EQ(j["shards"][0]["address"], "127.0.0.1:40001");
  EXPECT_EQ(j["shards"][0]["problem"], "not running (connection refused)");
  const nlohmann::json& s = j["shards"][1];
  EXPECT_EQ(s["shard"], 1);
  EXPECT_EQ(s["answered"], true);
  EXPECT_EQ(s["endpoint"], "tcp://127.0.0.1:40002");
  EXPECT_DOUBLE_EQ(s["uptime_s"].get<double>(), 14.5);
  EXPECT_DOUBLE_EQ(s["requests_per_s"].get<double>(), 120.5);
  EXPECT_DOUBLE_EQ(s["pushes_per_s"].get<double>(), 100.5);
  EXPECT_DOUBLE_EQ(s["pulls_per_s"].get<double>(), 20);
  EXPECT_DOUBLE_EQ(s["in_bytes_per_s"].get<double>(), 2e6);
  EXPECT_DOUBLE_EQ(s["out_bytes_per_s"].get<double>(), 0.5e6);
  EXPECT_EQ(s["waiting_pulls"], 2);
  EXPECT_EQ(s["errors"], 1);
  EXPECT_EQ(s["rss_bytes"], 52428800);
  EXPECT_EQ(s["values_bytes"], 16000000);
  EXPECT_EQ(s["checkpoint"]["last_clock"], 40);
  EXPECT_EQ(s["checkpoint"]["writing"], true);
  EXPECT_TRUE(s["failed"].is_null());
  // The shard's whole report, as it answered.
  EXPECT_EQ(s["stats"]["pushes"], 600);
  EXPECT_EQ(s["stats"]["workers"][2]["left"], true);
  EXPECT_EQ(s["stats"]["checkpoint"]["dir"], "/tmp/my checkpoints");
  EXPECT_FALSE(j["shards"][0].contains("stats"));  // as its other facts
}

TEST(JobViewJsonTest, UnknownRatesAreNull) {
  const JobView view =
      BuildJobView(TwoShardJob(), std::vector<ShardSample>{Sample(0, Report0(), {})}, {});
  const nlohmann::json j = nlohmann::json::parse(JobViewJson(view), nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_TRUE(j["interval_s"].is_null());
  EXPECT_TRUE(j["shards"][0]["in_bytes_per_s"].is_null());
  EXPECT_TRUE(j["shards"][0]["rss_bytes"].is_null());
  EXPECT_TRUE(j["shards"][0]["checkpoint"].is_null());
}

TEST(TcpProbeTest, APortNobodyListensOnIsRefusedAtOnce) {
  HostPort where;
  std::string problem;
  ASSERT_TRUE(ParseHostPort("127.0.0.1:" + std::to_string(FreePort()), &where, &problem))
      << problem;
  const auto start = std::chrono::steady_clock::now();
  const TcpProbe probe = ProbeTcp(where, milliseconds(1000));
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(1500));
  EXPECT_EQ(probe.result, ProbeResult::kRefused) << probe.reason;
  EXPECT_EQ(probe.reason, "connection refused");
}

TEST(TcpProbeTest, AListeningPortIsListening) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 4), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  HostPort where;
  std::string problem;
  ASSERT_TRUE(ParseHostPort("localhost:" + std::to_string(ntohs(addr.sin_port)), &where, &problem))
      << problem;
  const TcpProbe probe = ProbeTcp(where, milliseconds(1000));
  close(fd);
  EXPECT_EQ(probe.result, ProbeResult::kListening) << probe.reason;
}

}  // namespace
}  // namespace ps
