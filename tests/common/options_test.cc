// Tests of JobOptions::Validate() (common/options.h) on structs built in
// code; the YAML loader's tests are in config_test.cc, the train section's
// in tests/worker/train_options_test.cc.
#include "common/options.h"

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>

#include <gtest/gtest.h>

#include "common/status.h"
#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"

namespace ps {
namespace {

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

bool StartsWith(const std::string& text, const std::string& prefix) {
  return text.rfind(prefix, 0) == 0;
}

// A valid job: one loopback server, one worker, one 64 x 1 table.
JobOptions ValidJob() {
  JobOptions job = TestJob().Servers(1, 7000).Table("weights", 64).Build();
  job.source = "job.yaml";
  return job;
}

TEST(OptionsValidateTest, ValidJobPasses) {
  EXPECT_OK(ValidJob().Validate());
}

TEST(OptionsValidateTest, MessageStartsWithSourceAndYamlPath) {
  JobOptions job = ValidJob();
  job.tables[0].rows = 0;
  const Status status = job.Validate();
  EXPECT_TRUE(InvalidWith(status, {}));
  EXPECT_TRUE(StartsWith(status.message(), "job.yaml: tables[0].rows: got 0"))
      << status.message();
  EXPECT_TRUE(Contains(status.message(), "; expected ")) << status.message();
}

TEST(OptionsValidateTest, EmptySourceOmitsThePrefix) {
  JobOptions job = ValidJob();
  job.source.clear();
  job.tables[0].rows = 0;
  EXPECT_TRUE(StartsWith(job.Validate().message(), "tables[0].rows: "))
      << job.Validate().message();
}

TEST(OptionsValidateTest, AcceptsWellFormedLoopbackEndpoints) {
  for (const char* server :
       {"127.0.0.1:1", "127.0.0.1:65535", "127.8.9.10:7000", "localhost:7000",
        "LocalHost:7000", "[::1]:7000", "[::ffff:127.0.0.1]:7000"}) {
    JobOptions job = ValidJob();
    job.cluster.servers = {server};
    const Status status = job.Validate();
    EXPECT_OK(status) << server << ": " << status.ToString();
  }
}

TEST(OptionsValidateTest, RejectsMalformedEndpoints) {
  for (const char* server :
       {"", "127.0.0.1", "127.0.0.1:", ":7000", "127.0.0.1:0",
        "127.0.0.1:65536", "127.0.0.1:7x", "127.0.0.1:-1", "127.0.0.1:+80",
        "127.0.0.1:000007000", "[::1]", "[::1]7000", "[]:7000", "[::1:7000",
        "[localhost]:7000", "::1:7000", "local host:7000", "*:7000"}) {
    JobOptions job = ValidJob();
    job.cluster.servers = {server};
    job.cluster.allow_remote = true;  // only the form is at fault
    EXPECT_TRUE(InvalidWith(job.Validate(), {"cluster.servers[0]"}))
        << "server \"" << server << "\"";
  }
}

TEST(OptionsValidateTest, NonLoopbackHostsNeedAllowRemote) {
  for (const char* server :
       {"10.0.0.1:7000", "0.0.0.0:7000", "[2001:db8::1]:7000",
        "example.com:7000", "128.0.0.1:7000"}) {
    JobOptions job = ValidJob();
    job.cluster.servers = {server};
    EXPECT_TRUE(
        InvalidWith(job.Validate(), {"cluster.servers[0]", "allow_remote"}))
        << server;
    job.cluster.allow_remote = true;
    EXPECT_OK(job.Validate()) << server;
  }
}

TEST(OptionsValidateTest, SameEndpointSpelledDifferentlyIsDuplicate) {
  JobOptions job = ValidJob();
  job.cluster.servers = {"localhost:7000", "LOCALHOST:07000"};
  EXPECT_TRUE(InvalidWith(job.Validate(), {"cluster.servers[1]"}));
  job.cluster.servers = {"[::1]:7000", "[0:0:0:0:0:0:0:1]:7000"};
  EXPECT_TRUE(InvalidWith(job.Validate(), {"cluster.servers[1]"}));
}

TEST(OptionsValidateTest, SameHostOnDifferentPortsIsFine) {
  JobOptions job = ValidJob();
  job.cluster.servers = {"127.0.0.1:7000", "127.0.0.1:7001", "[::1]:7000"};
  EXPECT_OK(job.Validate());
}

TEST(OptionsValidateTest, ZeroWorkersIsRejected) {
  JobOptions job = ValidJob();
  job.cluster.workers = 0;
  EXPECT_TRUE(InvalidWith(job.Validate(), {"cluster.workers"}));
}

TEST(OptionsValidateTest, TableNamesAllowLettersDigitsUnderscoreDotDash) {
  JobOptions job = ValidJob();
  job.tables[0].name = "Emb_9.v-2";
  EXPECT_OK(job.Validate());
  for (const char* name : {"", "a b", "a/b", "w\xc3\xa9", "a:b"}) {
    job.tables[0].name = name;
    EXPECT_TRUE(InvalidWith(job.Validate(), {"tables[0].name"}))
        << "name \"" << name << "\"";
  }
}

TEST(OptionsValidateTest, RowsTimesDimMustFitIn64BitBytes) {
  JobOptions job = ValidJob();
  job.tables[0].dim = 16;
  const uint64_t max_rows =
      std::numeric_limits<uint64_t>::max() / 16 / sizeof(float);
  job.tables[0].rows = max_rows;
  EXPECT_OK(job.Validate());
  job.tables[0].rows = max_rows + 1;
  EXPECT_TRUE(InvalidWith(job.Validate(), {"tables[0]: ", "overflow"}));
}

TEST(OptionsValidateTest, SgdLearningRateMustBePositiveAndFinite) {
  for (float lr : {0.0f, -0.1f, std::numeric_limits<float>::infinity(),
                   std::numeric_limits<float>::quiet_NaN()}) {
    JobOptions job = ValidJob();
    job.tables[0].optimizer.lr = lr;
    EXPECT_TRUE(InvalidWith(job.Validate(), {"tables[0].optimizer.lr"})) << lr;
  }
}

TEST(OptionsValidateTest, AddOptimizerIgnoresLearningRate) {
  JobOptions job = ValidJob();
  job.tables[0].optimizer.kind = OptimizerKind::kAdd;
  job.tables[0].optimizer.lr = 0.0f;
  EXPECT_OK(job.Validate());
}

TEST(OptionsValidateTest, ConstantInitMayBeNegativeButMustBeFinite) {
  JobOptions job = ValidJob();
  job.tables[0].init.kind = InitKind::kConstant;
  job.tables[0].init.value = -3.0f;
  EXPECT_OK(job.Validate());
  job.tables[0].init.value = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(InvalidWith(job.Validate(), {"tables[0].init.value"}));
}

TEST(OptionsValidateTest, RandomInitScaleMustBeFiniteAndNonNegative) {
  JobOptions job = ValidJob();
  job.tables[0].init.kind = InitKind::kUniform;
  job.tables[0].init.value = 0.0f;
  EXPECT_OK(job.Validate());
  job.tables[0].init.value = -0.1f;
  EXPECT_TRUE(InvalidWith(job.Validate(), {"tables[0].init.scale"}));
  job.tables[0].init.kind = InitKind::kNormal;
  job.tables[0].init.value = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(InvalidWith(job.Validate(), {"tables[0].init.stddev"}));
}

TEST(OptionsValidateTest, ServerLimitBoundaries) {
  JobOptions job = ValidJob();
  job.server.max_request_bytes = 1024;
  job.server.max_keys_per_request = 1;
  job.server.io_threads = 64;
  EXPECT_OK(job.Validate());
  job.server.max_request_bytes = 1023;
  EXPECT_TRUE(InvalidWith(job.Validate(), {"server.max_request_bytes"}));
  job = ValidJob();
  job.server.max_keys_per_request = 0;
  EXPECT_TRUE(InvalidWith(job.Validate(), {"server.max_keys_per_request"}));
  job = ValidJob();
  job.server.io_threads = 0;
  EXPECT_TRUE(InvalidWith(job.Validate(), {"server.io_threads"}));
  job.server.io_threads = 65;
  EXPECT_TRUE(InvalidWith(job.Validate(), {"server.io_threads"}));
}

TEST(OptionsValidateTest, ClientLimitBoundaries) {
  JobOptions job = ValidJob();
  job.client.request_timeout_ms = 1;
  job.client.max_in_flight = 1;
  job.client.io_threads = 1;
  EXPECT_OK(job.Validate());
  job.client.request_timeout_ms = 0;
  EXPECT_TRUE(InvalidWith(job.Validate(), {"client.request_timeout_ms"}));
  job = ValidJob();
  job.client.max_in_flight = 0;
  EXPECT_TRUE(InvalidWith(job.Validate(), {"client.max_in_flight"}));
  job = ValidJob();
  job.client.io_threads = 0;
  EXPECT_TRUE(InvalidWith(job.Validate(), {"client.io_threads"}));
}

TEST(OptionsValidateTest, TableIdIsTheIndexOrNotFound) {
  JobOptions job = ValidJob();
  TableOptions bias;
  bias.name = "bias";
  bias.rows = 1;
  job.tables.push_back(bias);
  StatusOr<uint32_t> id = job.TableId("bias");
  ASSERT_OK(id);
  EXPECT_EQ(*id, 1u);
  StatusOr<uint32_t> missing = job.TableId("nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(missing.status().message(), "\"nope\""))
      << missing.status().message();
}

}  // namespace
}  // namespace ps
