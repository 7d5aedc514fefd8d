#include "common/rank.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <span>
#include <string>

#include "tests/util/status_matchers.h"

namespace ps {
namespace {

constexpr const char* kRankVars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID",
                                     "JOB_COMPLETION_INDEX"};
// The world sizes, which decide whether a world rank takes the offset.
constexpr const char* kSizeVars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"};
const std::span<const char* const> kAllVars[] = {kRankVars, kSizeVars};

// Clears every variable ResolveRank reads and puts back what the process had
// when the test ends, so a test under mpirun or in a pod sees only what it
// sets, and the next test sees the process's own environment again.
class RankTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (std::span<const char* const> vars : kAllVars) {
      for (const char* var : vars) {
        const char* value = std::getenv(var);
        if (value != nullptr) saved_[var] = value;
        unsetenv(var);
      }
    }
  }
  void TearDown() override {
    for (std::span<const char* const> vars : kAllVars) {
      for (const char* var : vars) {
        auto it = saved_.find(var);
        if (it == saved_.end()) {
          unsetenv(var);
        } else {
          setenv(var, it->second.c_str(), 1);
        }
      }
    }
  }
  static void Set(const char* var, const char* value) { setenv(var, value, 1); }

 private:
  std::map<std::string, std::string> saved_;
};

RankSources Flag(int64_t value) {
  RankSources sources;
  sources.flag = value;
  return sources;
}
RankSources Hostname(std::string name) {
  RankSources sources;
  sources.hostname = std::move(name);
  return sources;
}
RankSources Offset(uint32_t offset) {
  RankSources sources;
  sources.world_offset = offset;
  return sources;
}

TEST_F(RankTest, FlagIsTakenAndRangeChecked) {
  auto rank = ResolveRank(Flag(2), 3, "rank");
  ASSERT_OK(rank);
  EXPECT_EQ(rank->rank, 2u);
  EXPECT_EQ(rank->source, "--rank");
  EXPECT_TRUE(
      InvalidWith(ResolveRank(Flag(3), 3, "rank").status(),
                  {"rank 3 (from --rank) is out of range", "valid: 0..2", "cluster.workers is 3"}));
  EXPECT_TRUE(InvalidWith(ResolveRank(Flag(-1), 3, "shard").status(),
                          {"shard -1 (from --shard) is negative", "cluster.servers lists 3"}));
}

TEST_F(RankTest, FlagWinsOverEveryEnvironmentVariable) {
  Set("OMPI_COMM_WORLD_RANK", "1");
  Set("JOB_COMPLETION_INDEX", "1");
  RankSources sources = Flag(0);
  sources.world_offset = 1;
  auto rank = ResolveRank(sources, 2, "rank");
  ASSERT_OK(rank);
  EXPECT_EQ(rank->rank, 0u);
  EXPECT_EQ(rank->source, "--rank");
}

TEST_F(RankTest, EachWorldRankVariableIsASourceWithTheOffset) {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    SCOPED_TRACE(var);
    Set(var, "5");
    auto rank = ResolveRank(Offset(2), 4, "rank");
    ASSERT_OK(rank);
    EXPECT_EQ(rank->rank, 3u);
    EXPECT_EQ(rank->source, std::string("environment variable ") + var + "=\"5\" minus offset 2");
    unsetenv(var);
  }
}

TEST_F(RankTest, WorldRanksComeInOrderOmpiPmiSlurm) {
  Set("SLURM_PROCID", "3");
  Set("PMI_RANK", "2");
  Set("OMPI_COMM_WORLD_RANK", "1");
  EXPECT_EQ(ResolveRank({}, 4, "shard")->rank, 1u);
  unsetenv("OMPI_COMM_WORLD_RANK");
  EXPECT_EQ(ResolveRank({}, 4, "shard")->rank, 2u);
  unsetenv("PMI_RANK");
  EXPECT_EQ(ResolveRank({}, 4, "shard")->rank, 3u);
}

TEST_F(RankTest, JobCompletionIndexIsRoleLocalAndTakesNoOffset) {
  Set("JOB_COMPLETION_INDEX", "3");
  auto rank = ResolveRank(Offset(2), 4, "rank");
  ASSERT_OK(rank);
  EXPECT_EQ(rank->rank, 3u);
  EXPECT_EQ(rank->source, "environment variable JOB_COMPLETION_INDEX=\"3\"");
}

TEST_F(RankTest, WorldRankWinsOverJobCompletionIndex) {
  // mpirun inside an Indexed Job's pod: every process has the pod's index.
  Set("JOB_COMPLETION_INDEX", "0");
  Set("OMPI_COMM_WORLD_RANK", "3");
  auto rank = ResolveRank(Offset(2), 4, "rank");
  ASSERT_OK(rank);
  EXPECT_EQ(rank->rank, 1u);
}

TEST_F(RankTest, HostnameOrdinalIsTakenOnlyWhenAskedFor) {
  auto rank = ResolveRank(Hostname("ps-server-3"), 4, "shard");
  ASSERT_OK(rank);
  EXPECT_EQ(rank->rank, 3u);
  EXPECT_EQ(rank->source, "host name \"ps-server-3\"");
  // Not asked for: an ordinary host's digits are never a rank.
  EXPECT_TRUE(InvalidWith(ResolveRank({}, 4, "shard").status(), {"no shard given"}));
}

TEST_F(RankTest, HostnameOrdinalIsRoleLocalAndWinsOverTheEnvironment) {
  Set("OMPI_COMM_WORLD_RANK", "0");
  Set("JOB_COMPLETION_INDEX", "0");
  RankSources sources = Hostname("ps-worker-1");
  sources.world_offset = 2;
  auto rank = ResolveRank(sources, 2, "rank");
  ASSERT_OK(rank);
  EXPECT_EQ(rank->rank, 1u);
}

TEST_F(RankTest, HostnameOrdinalOfAFullNameIsTheFirstLabels) {
  EXPECT_EQ(ResolveRank(Hostname("ps-server-1.ps-server.default.svc"), 2, "shard")->rank, 1u);
}

TEST_F(RankTest, HostnameWithoutOrdinalIsRefusedNamingIt) {
  for (const char* name : {"node", "ps-server-", "-3", "ps-server-x3", "ps-server-3a", "",
                           "ps-server+3", "ps-server-1x.5"}) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(InvalidWith(ResolveRank(Hostname(name), 4, "shard").status(),
                            {"--shard-from-hostname: host name \"" + std::string(name) + "\"",
                             "does not end in \"-<ordinal>\"", "valid: 0..3", "pass --shard N"}));
  }
}

TEST_F(RankTest, HostnameOrdinalOutOfRangeIsRefused) {
  EXPECT_TRUE(InvalidWith(ResolveRank(Hostname("ps-server-2"), 2, "shard").status(),
                          {"shard 2 (from host name \"ps-server-2\") is out of range",
                           "valid: 0..1", "cluster.servers lists 2", "replicas"}));
}

TEST_F(RankTest, FlagAndHostnameTogetherAreRefused) {
  RankSources sources = Flag(1);
  sources.hostname = "ps-server-1";
  EXPECT_TRUE(InvalidWith(ResolveRank(sources, 2, "shard").status(),
                          {"pass either --shard or --shard-from-hostname, not both"}));
}

TEST_F(RankTest, MalformedEnvironmentValuesAreRefusedNamingTheVariable) {
  for (const char* var : kRankVars) {
    for (const char* value : {"x5", "5x", "", " 1", "+1", "-1", "1.0", "99999999999999999999999"}) {
      SCOPED_TRACE(std::string(var) + "=" + value);
      Set(var, value);
      EXPECT_TRUE(InvalidWith(ResolveRank({}, 4, "rank").status(),
                              {"environment variable " + std::string(var) + "=\"" + value + "\"",
                               "is not a non-negative integer", "valid: 0..3", "pass --rank N"}));
      unsetenv(var);
    }
  }
}

TEST_F(RankTest, MalformedHigherPrecedenceVariableIsNotSkipped) {
  // A broken world rank is an error even when a later source would do.
  Set("PMI_RANK", "oops");
  Set("JOB_COMPLETION_INDEX", "0");
  EXPECT_TRUE(InvalidWith(ResolveRank({}, 2, "rank").status(), {"PMI_RANK=\"oops\""}));
}

// Workers started by a launcher of their own (mpirun -np 4 ps_worker, after
// the servers were started otherwise): a world of exactly the worker count
// holds only workers, and its ranks need no offset.
TEST_F(RankTest, AWorldOfOnlyThisRolesProcessesTakesNoOffset) {
  const std::pair<const char*, const char*> vars[] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                                      {"PMI_RANK", "PMI_SIZE"},
                                                      {"SLURM_PROCID", "SLURM_NTASKS"}};
  for (const auto& [rank_var, size_var] : vars) {
    SCOPED_TRACE(rank_var);
    Set(rank_var, "1");
    Set(size_var, "4");  // the job's 4 workers and nothing else
    auto rank = ResolveRank(Offset(2), 4, "rank");
    ASSERT_OK(rank);
    EXPECT_EQ(rank->rank, 1u);
    EXPECT_EQ(rank->source, std::string("environment variable ") + rank_var + "=\"1\" (" +
                                size_var + " is the role's count: no offset)");
    Set(size_var, "6");  // 2 servers + 4 workers: the offset applies
    rank = ResolveRank(Offset(2), 4, "rank");
    EXPECT_FALSE(rank.ok());
    Set(rank_var, "3");
    rank = ResolveRank(Offset(2), 4, "rank");
    ASSERT_OK(rank);
    EXPECT_EQ(rank->rank, 1u);
    unsetenv(rank_var);
    unsetenv(size_var);
  }
}

TEST_F(RankTest, WorldRankBelowTheOffsetIsAServersRank) {
  Set("OMPI_COMM_WORLD_RANK", "1");
  EXPECT_TRUE(InvalidWith(ResolveRank(Offset(2), 4, "rank").status(),
                          {"OMPI_COMM_WORLD_RANK=\"1\" is below the offset 2",
                           "world ranks 0..1 are the servers'", "ps_server : -np"}));
}

TEST_F(RankTest, EnvironmentRankOutOfRangeNamesTheSourceAndTheRange) {
  Set("SLURM_PROCID", "7");
  EXPECT_TRUE(InvalidWith(
      ResolveRank(Offset(2), 4, "rank").status(),
      {"rank 5 (from environment variable SLURM_PROCID=\"7\" minus offset 2) is out of range",
       "valid: 0..3", "cluster.workers is 4", "mpirun -np"}));
  unsetenv("SLURM_PROCID");
  Set("JOB_COMPLETION_INDEX", "2");
  EXPECT_TRUE(InvalidWith(ResolveRank({}, 2, "shard").status(),
                          {"shard 2 (from environment variable JOB_COMPLETION_INDEX=\"2\") is "
                           "out of range",
                           "cluster.servers lists 2", "completions"}));
}

TEST_F(RankTest, NoSourceSaysEveryWayToGiveOne) {
  EXPECT_TRUE(
      InvalidWith(ResolveRank(Offset(2), 4, "rank").status(),
                  {"no rank given", "--rank N", "--rank-from-hostname", "OMPI_COMM_WORLD_RANK",
                   "PMI_RANK", "SLURM_PROCID", "JOB_COMPLETION_INDEX"}));
}

TEST_F(RankTest, LocalHostNameIsTheKernels) {
  auto name = LocalHostName();
  ASSERT_OK(name);
  EXPECT_FALSE(name->empty());
}

}  // namespace
}  // namespace ps
