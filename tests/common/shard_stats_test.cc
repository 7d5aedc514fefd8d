// A shard's STATS as a struct (common/shard_stats.h): the JSON view reads
// back to the same struct, and the text view keeps the lines that
// `ps_ctl stats`, scripts and tests read.
#include "common/shard_stats.h"

#include <gtest/gtest.h>

#include "common/wire.h"
#include "tests/util/example_stats.h"
#include "tests/util/status_matchers.h"

namespace ps {
namespace {

TEST(ShardStatsTest, TheTextViewHasEveryLineInItsPlace) {
  EXPECT_EQ(ShardStatsText(ExampleShardStats()),
            "shard 1 endpoint tcp://127.0.0.1:40002 uptime_s 12.5\n"
            "pushes 600 pulls 20 errors 1 bytes_in 4000000 bytes_out 2000000 copy_on_write 3\n"
            "consistency staleness 3 min_clock 48 slowest_worker 1 waiting_pulls 2 "
            "pulls_waited 7 max_blocked_lead 3\n"
            "worker_clocks 60 48 61\n"
            "worker_targets 100 100 0\n"
            "worker_silent_ms 12 2300 40\n"
            "backup_workers 1 quorum 2 late_pushes 4\n"
            "worker_late_pushes 0 4 0\n"
            "pushes_per_s 100.5 pulls_per_s 20\n"
            "recovery started_clock 10 lost_clocks 2 repeated_pushes 5 resumes 1\n"
            "refused refused_clocks 6 refused_results 7 max_resume_clocks 85 "
            "refusals_not_logged 9 refused_sum_clocks 8\n"
            "sums clocks 2 bytes 1600 parked_pushes 1 parked_push_bytes 64\n"
            "limits queued_reply_bytes 100 max_connection_bytes 50 connections_queued 2 "
            "max_queued_reply_bytes 268435456 pulls_refused_queued_bytes 11 "
            "pulls_refused_waiting 12 replies_dropped 13 connections_open 3 "
            "connections_refused 14 max_connections 896\n"
            "checkpoint dir /tmp/my checkpoints last_clock 40 writing 1\n"
            "checkpoints started 3 requests_waiting 1\n"
            "cache_hit_rate 0:0.25 1:- 2:-\n"
            "dead_workers 1\n"
            "left_workers 2\n"
            "evaluator reading silent_ms 150\n"
            "failed checkpoint write: disk full\n"
            "replication factor 2 epoch 5 last_seq 700 committed 699 backup_1_acked 699\n"
            "checksum w beef\n"
            "primary epoch 5 accepting 1 fenced_refusals 0\n"
            "memory rss_bytes 52428800 values_bytes 16000000\n"
            "security curve refused_handshakes 15 failed_handshakes 16 refused_requests 17\n"
            "table w rows 1000 dim 4 owned [500, 1000) non_finite_rows 0 refused_rows 2\n");
}

TEST(ShardStatsTest, APlainShardLeavesOutTheOptionalLines) {
  ShardStats s;
  s.consistency = "asp";
  s.workers.resize(2);
  s.security = "none";
  const std::string text = ShardStatsText(s);
  EXPECT_NE(text.find("dead_workers\nleft_workers\n"), std::string::npos) << text;
  EXPECT_NE(text.find("cache_hit_rate 0:- 1:-\n"), std::string::npos) << text;
  for (const char* absent : {"backup_workers", "checkpoint", "evaluator", "failed",
                             "replication", "checksum", "primary", "table"}) {
    EXPECT_EQ(text.find(std::string("\n") + absent), std::string::npos) << absent << "\n" << text;
  }
}

TEST(ShardStatsTest, ABackupReportsItsOwnLines) {
  ShardStats s;
  s.shard = 0;
  s.endpoint = "tcp://127.0.0.1:8001";
  s.backup = ShardStats::BackupReplica{1, 700, 2, 40};
  s.min_clock = 41;
  s.workers.resize(2);
  s.workers[0].clock = 41;
  s.workers[1].clock = 42;
  s.checksums = {{"w", 0xbeef}, {"v", 10}};
  EXPECT_EQ(ShardStatsText(s),
            "backup 1 of shard 0 endpoint tcp://127.0.0.1:8001\n"
            "replica applied 700 refused 2 min_clock 41 started_clock 40\n"
            "worker_clocks 41 42\n"
            "checksum w beef\n"
            "checksum v a\n");
}

TEST(ShardStatsTest, JsonReadsBackToTheSameReport) {
  const ShardStats known = ExampleShardStats();
  const std::string json = ShardStatsJson(known);
  EXPECT_EQ(json.find('\n'), std::string::npos) << "one line";
  auto back = ParseShardStatsJson(json);
  ASSERT_OK(back);
  // Every field: the two views of the copy are those of the original.
  EXPECT_EQ(ShardStatsJson(*back), json);
  EXPECT_EQ(ShardStatsText(*back), ShardStatsText(known));
  EXPECT_EQ(back->workers[1].late_pushes, 4u);
  EXPECT_EQ(back->DeadWorkers(), std::vector<uint32_t>{1});
  EXPECT_EQ(back->replication->backups[0].state, "acked");
  EXPECT_FALSE(back->backup.has_value());
}

TEST(ShardStatsTest, JsonOfAPlainShardReadsBackWithoutTheOptionalParts) {
  ShardStats plain;
  plain.uptime_s = 0.1 + 0.2;  // not exact in decimal: read back bit for bit
  auto back = ParseShardStatsJson(ShardStatsJson(plain));
  ASSERT_OK(back);
  EXPECT_EQ(back->uptime_s, plain.uptime_s);
  EXPECT_FALSE(back->evaluator.has_value());
  EXPECT_FALSE(back->replication.has_value());
  EXPECT_FALSE(back->primary.has_value());
  EXPECT_FALSE(back->backup_workers.has_value());
}

TEST(ShardStatsTest, MissingAndUnknownFieldsRead) {
  auto old = ParseShardStatsJson(R"({"shard":3,"pushes":5,"a_newer_field":[1,2]})");
  ASSERT_OK(old);
  EXPECT_EQ(old->shard, 3u);
  EXPECT_EQ(old->pushes, 5u);
  EXPECT_EQ(old->pulls, 0u);
}

TEST(ShardStatsTest, ATextReportOrAWrongTypeIsRefusedSayingWhat) {
  auto text = ParseShardStatsJson("shard 0 endpoint tcp://127.0.0.1:1 uptime_s 1\n");
  EXPECT_EQ(text.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(text.status().message().find("not a JSON object"), std::string::npos)
      << text.status().message();
  auto typed = ParseShardStatsJson(R"({"shard":"one"})");
  EXPECT_EQ(typed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(typed.status().message().find("wrong type"), std::string::npos)
      << typed.status().message();
  EXPECT_EQ(ParseShardStatsJson("[1]").status().code(), StatusCode::kInvalidArgument);
}

TEST(ShardStatsTest, TheReplyIsJsonOnlyWhenAskedFor) {
  const ShardStats known = ExampleShardStats();
  EXPECT_EQ(StatsReplyText(known, 0), ShardStatsText(known));
  EXPECT_EQ(StatsReplyText(known, kFlagStatsJson), ShardStatsJson(known));
}

}  // namespace
}  // namespace ps
