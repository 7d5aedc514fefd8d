// Tests of the YAML job loader (common/config.h); JobOptions::Validate() on
// structs built in code is tested in options_test.cc, and the train section,
// which the worker reads, in tests/worker/train_options_test.cc. Bad inputs
// live in tests/data/config/bad_*.yaml, one per error class; every example
// job in config/ must load.
#include "common/config.h"
#include "common/rendezvous.h"
#include "common/metrics.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/options.h"
#include "common/status.h"
#include "tests/util/status_matchers.h"
#include "tests/util/temp_dir.h"
#include "tests/util/test_job.h"

namespace ps {
namespace {

const std::string kConfigDir = std::string(PS_SOURCE_DIR) + "/config";
const std::string kBadDir = std::string(PS_SOURCE_DIR) + "/tests/data/config";

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

bool StartsWith(const std::string& text, const std::string& prefix) {
  return text.rfind(prefix, 0) == 0;
}

// Loads tests/data/config/<name>; it must fail with InvalidArgument whose
// message starts with the file's path and contains each of `parts`.
::testing::AssertionResult BadFileRejected(
    const std::string& name, std::initializer_list<std::string> parts) {
  const std::string path = kBadDir + "/" + name;
  return RejectedNamingFile(LoadJobFile(path), path, parts);
}

// A valid YAML job with `servers` as the cluster's server list and `extra`
// appended at the top level.
std::string JobYaml(const std::string& servers = "[\"127.0.0.1:7000\"]",
                    const std::string& extra = "") {
  return "cluster: { servers: " + servers +
         ", workers: 1 }\n"
         "tables:\n"
         "  - { name: weights, rows: 64 }\n" +
         extra;
}

// A YAML job whose only table is `table` (a flow map's contents).
std::string JobYamlWithTable(const std::string& table) {
  return "cluster: { servers: [\"127.0.0.1:7000\"], workers: 1 }\n"
         "tables:\n"
         "  - { " +
         table + " }\n";
}

// ---------------------------------------------------------------------------
// Examples in config/

TEST(ConfigTest, EveryExampleInConfigDirectoryLoadsAndValidates) {
  int loaded = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kConfigDir)) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    StatusOr<JobOptions> job = LoadJobFile(entry.path().string());
    ASSERT_OK(job);
    EXPECT_EQ(job->source, entry.path().string());
    EXPECT_OK(job->Validate());
    ++loaded;
  }
  EXPECT_GE(loaded, 3) << "expected local_demo, two_shards and single";
}

TEST(ConfigTest, LocalDemoIsTwoShardJobWithOneWeightsTable) {
  StatusOr<JobOptions> job = LoadJobFile(kConfigDir + "/local_demo.yaml");
  ASSERT_OK(job);
  EXPECT_EQ(job->cluster.servers,
            (std::vector<std::string>{"127.0.0.1:7100", "127.0.0.1:7101"}));
  EXPECT_EQ(job->cluster.workers, 2u);
  ASSERT_EQ(job->tables.size(), 1u);
  EXPECT_EQ(job->tables[0].name, "weights");
  EXPECT_EQ(job->tables[0].rows, 512u);
  EXPECT_EQ(job->tables[0].dim, 1u);
  EXPECT_EQ(job->tables[0].optimizer.kind, OptimizerKind::kSgd);
  EXPECT_GT(job->tables[0].optimizer.lr, 0.0f);
}

TEST(ConfigTest, TwoShardsHasLargeSparseTable) {
  StatusOr<JobOptions> job = LoadJobFile(kConfigDir + "/two_shards.yaml");
  ASSERT_OK(job);
  EXPECT_EQ(job->cluster.servers.size(), 2u);
  StatusOr<uint32_t> id = job->TableId("embeddings");
  ASSERT_OK(id);
  EXPECT_EQ(job->tables[*id].rows, 1000000u);
  EXPECT_EQ(job->tables[*id].dim, 16u);
  EXPECT_EQ(job->tables[*id].init.kind, InitKind::kNormal);
}

TEST(ConfigTest, SingleHasOneServerAndOneWorker) {
  StatusOr<JobOptions> job = LoadJobFile(kConfigDir + "/single.yaml");
  ASSERT_OK(job);
  EXPECT_EQ(job->cluster.servers.size(), 1u);
  EXPECT_EQ(job->cluster.workers, 1u);
}

// ---------------------------------------------------------------------------
// Filling the options

TEST(ConfigTest, OmittedKeysTakeTheDefaultsOfOptionsH) {
  StatusOr<JobOptions> job = LoadJobString(JobYaml(), "mem");
  ASSERT_OK(job);
  const TableOptions table_defaults;
  const ServerOptions server_defaults;
  const ClientOptions client_defaults;
  EXPECT_FALSE(job->cluster.allow_remote);
  EXPECT_EQ(job->tables[0].dim, table_defaults.dim);
  EXPECT_EQ(job->tables[0].init.kind, InitKind::kZeros);
  EXPECT_EQ(job->tables[0].optimizer.kind, table_defaults.optimizer.kind);
  EXPECT_EQ(job->tables[0].optimizer.lr, table_defaults.optimizer.lr);
  EXPECT_EQ(job->server.max_request_bytes, server_defaults.max_request_bytes);
  EXPECT_EQ(job->server.max_keys_per_request,
            server_defaults.max_keys_per_request);
  EXPECT_EQ(job->server.io_threads, server_defaults.io_threads);
  EXPECT_EQ(job->client.request_timeout_ms, client_defaults.request_timeout_ms);
  EXPECT_EQ(job->client.max_in_flight, client_defaults.max_in_flight);
  EXPECT_EQ(job->client.io_threads, client_defaults.io_threads);
  EXPECT_EQ(job->source, "mem");
}

TEST(ConfigTest, EveryKeyIsReadIntoItsField) {
  const std::string yaml =
      "cluster: { servers: [\"127.0.0.1:7000\", \"[::1]:7001\"], workers: 3,"
      " allow_remote: false }\n"
      "tables:\n"
      "  - name: w\n"
      "    rows: 8\n"
      "    dim: 1\n"
      "    init: { type: uniform, scale: 0.25, seed: 9 }\n"
      "    optimizer: { type: sgd, lr: 0.5 }\n"
      "  - name: c\n"
      "    rows: 18446744073709551\n"
      "    dim: 4\n"
      "    init: { type: constant, value: -1.5 }\n"
      "    optimizer: { type: add }\n"
      "server: { max_request_bytes: 1024, max_keys_per_request: 7,"
      " io_threads: 64, reject_non_finite: false, on_non_finite_result: flag,"
      " max_resume_clocks: 50, huge_pages: false }\n"
      "client: { request_timeout_ms: 5, max_in_flight: 6, io_threads: 2,"
      " push_part_bytes: 4096, cache: false }\n"
      "train: { table: w, features: 8, samples_per_worker: 100,"
      " batch_size: 100, iterations: 3, noise: 0, seed: 7, log_every: 0 }\n";
  StatusOr<JobOptions> job = LoadJobString(yaml, "mem");
  ASSERT_OK(job);
  EXPECT_EQ(job->cluster.servers[1], "[::1]:7001");
  EXPECT_EQ(job->cluster.workers, 3u);
  EXPECT_EQ(job->tables[0].init.kind, InitKind::kUniform);
  EXPECT_FLOAT_EQ(job->tables[0].init.value, 0.25f);
  EXPECT_EQ(job->tables[0].init.seed, 9u);
  EXPECT_FLOAT_EQ(job->tables[0].optimizer.lr, 0.5f);
  EXPECT_EQ(job->tables[1].rows, 18446744073709551u);
  EXPECT_EQ(job->tables[1].dim, 4u);
  EXPECT_EQ(job->tables[1].init.kind, InitKind::kConstant);
  EXPECT_FLOAT_EQ(job->tables[1].init.value, -1.5f);
  EXPECT_EQ(job->tables[1].optimizer.kind, OptimizerKind::kAdd);
  EXPECT_EQ(job->server.max_request_bytes, 1024u);
  EXPECT_EQ(job->server.max_keys_per_request, 7u);
  EXPECT_EQ(job->server.io_threads, 64u);
  EXPECT_EQ(job->server.on_non_finite_result, NonFiniteResultPolicy::kFlag);
  EXPECT_EQ(job->server.max_resume_clocks, 50u);
  EXPECT_FALSE(job->server.reject_non_finite);
  EXPECT_FALSE(job->server.huge_pages);
  EXPECT_EQ(job->client.request_timeout_ms, 5u);
  EXPECT_EQ(job->client.max_in_flight, 6u);
  EXPECT_EQ(job->client.push_part_bytes, 4096u);
  EXPECT_FALSE(job->client.cache);
  EXPECT_EQ(job->client.io_threads, 2u);
}

TEST(ConfigTest, NormalInitStddevFillsValue) {
  StatusOr<JobOptions> job = LoadJobString(
      JobYamlWithTable("name: w, rows: 4,"
                       " init: { type: normal, stddev: 0.125, seed: 3 }"),
      "mem");
  ASSERT_OK(job);
  EXPECT_EQ(job->tables[0].init.kind, InitKind::kNormal);
  EXPECT_FLOAT_EQ(job->tables[0].init.value, 0.125f);
  EXPECT_EQ(job->tables[0].init.seed, 3u);
}

TEST(ConfigTest, JobWideOptimizerAppliesToTablesWithoutTheirOwn) {
  const std::string yaml =
      "cluster: { servers: [\"127.0.0.1:7000\"], workers: 1 }\n"
      "optimizer: { type: sgd, lr: 0.25 }\n"
      "tables:\n"
      "  - { name: a, rows: 4 }\n"
      "  - { name: b, rows: 4, optimizer: { type: add } }\n";
  StatusOr<JobOptions> job = LoadJobString(yaml, "mem");
  ASSERT_OK(job);
  EXPECT_EQ(job->tables[0].optimizer.kind, OptimizerKind::kSgd);
  EXPECT_FLOAT_EQ(job->tables[0].optimizer.lr, 0.25f);
  EXPECT_EQ(job->tables[1].optimizer.kind, OptimizerKind::kAdd);
}

TEST(ConfigTest, TableOptimizerReplacesJobWideOneAsAWhole) {
  const std::string yaml =
      "cluster: { servers: [\"127.0.0.1:7000\"], workers: 1 }\n"
      "optimizer: { type: sgd, lr: 0.25 }\n"
      "tables:\n"
      "  - { name: a, rows: 4, optimizer: { type: sgd } }\n";
  StatusOr<JobOptions> job = LoadJobString(yaml, "mem");
  ASSERT_OK(job);
  EXPECT_FLOAT_EQ(job->tables[0].optimizer.lr, OptimizerOptions().lr);
}

// wire: how each table's values travel; fp32 both ways unless set, each
// direction on its own, and part of what every process must agree on.
TEST(ConfigTest, WireTypesPerTableAndDirection) {
  const std::string yaml =
      "cluster: { servers: [\"127.0.0.1:7000\"], workers: 1 }\n"
      "tables:\n"
      "  - { name: a, rows: 4 }\n"
      "  - { name: b, rows: 4, wire: { pull: bf16 } }\n"
      "  - { name: c, rows: 4, wire: { pull: fp16, push: bf16 } }\n";
  StatusOr<JobOptions> job = LoadJobString(yaml, "mem");
  ASSERT_OK(job);
  EXPECT_EQ(job->tables[0].wire.pull, WireType::kF32);
  EXPECT_EQ(job->tables[0].wire.push, WireType::kF32);
  EXPECT_EQ(job->tables[1].wire.pull, WireType::kBf16);
  EXPECT_EQ(job->tables[1].wire.push, WireType::kF32);
  EXPECT_EQ(job->tables[2].wire.pull, WireType::kF16);
  EXPECT_EQ(job->tables[2].wire.push, WireType::kBf16);
  const std::string agreement = EncodeAgreement(*job);
  EXPECT_NE(agreement.find("tables[2].wire=pull=fp16 push=bf16"), std::string::npos)
      << agreement;
  for (const char* bad : {"wire: { pull: fp8 }", "wire: { pul: bf16 }", "wire: bf16"}) {
    SCOPED_TRACE(bad);
    const std::string text =
        "cluster: { servers: [\"127.0.0.1:7000\"], workers: 1 }\n"
        "tables:\n"
        "  - { name: a, rows: 4, " + std::string(bad) + " }\n";
    StatusOr<JobOptions> refused = LoadJobString(text, "mem");
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(refused.status().message().find("wire"), std::string::npos)
        << refused.status().ToString();
  }
}

TEST(ConfigTest, HashedTablesAreReadWithTheirBoundSlotsAndWireTypes) {
  const std::string yaml =
      "cluster: { servers: [\"127.0.0.1:7000\", \"127.0.0.1:7001\"], workers: 1 }\n"
      "tables:\n"
      "  - { name: dense, rows: 4 }\n"
      "  - { name: users, keys: hashed, dim: 8, max_rows: 1000, wire: { push: bf16 } }\n"
      "  - { name: ads, keys: hashed, dim: 4, max_mb: 64, slots: 256,\n"
      "      admit: { min_pushes: 3, probability: 0.5, sketch_width: 65536 },\n"
      "      evict: { policy: lfu, idle_clocks: 100 }, wire: { pull: fp16, push: fp16 } }\n";
  StatusOr<JobOptions> job = LoadJobString(yaml, "mem");
  ASSERT_OK(job);
  EXPECT_FALSE(job->tables[0].hashed());
  EXPECT_TRUE(job->tables[1].hashed());
  EXPECT_EQ(job->tables[1].rows, 0u);
  EXPECT_EQ(job->tables[1].max_rows, 1000u);
  EXPECT_EQ(job->tables[1].HashSlots(), kDefaultHashSlots);
  EXPECT_EQ(job->tables[2].max_mb, 64u);
  EXPECT_EQ(job->tables[2].HashSlots(), 256u);
  EXPECT_EQ(job->tables[2].admit.min_pushes, 3u);
  EXPECT_EQ(job->tables[2].admit.probability, 0.5f);
  EXPECT_EQ(job->tables[2].admit.sketch_width, 65536u);
  EXPECT_FALSE(job->tables[1].admit.enabled());
  EXPECT_FALSE(job->tables[1].evict.enabled());
  EXPECT_EQ(job->tables[2].evict.policy, EvictPolicy::kLfu);
  EXPECT_EQ(job->tables[2].evict.idle_clocks, 100u);
  // The rendezvous compares a hashed table's bound and slots.
  const std::string agreement = EncodeAgreement(*job);
  EXPECT_NE(agreement.find("tables[1]=users keys=hashed slots=4096 max_rows=1000 dim=8"),
            std::string::npos)
      << agreement;
  EXPECT_NE(agreement.find("tables[2]=ads keys=hashed slots=256 max_mb=64 dim=4 admit=3,0.5,65536 evict=lfu,100"),
            std::string::npos)
      << agreement;
  EXPECT_NE(agreement.find("tables[0]=dense rows=4 dim=1"), std::string::npos) << agreement;
  // 16-bit pushes, with the worker's error feedback kept by id.
  EXPECT_EQ(job->tables[1].wire.push, WireType::kBf16);
  EXPECT_EQ(job->tables[2].wire.push, WireType::kF16);
  EXPECT_EQ(job->tables[2].wire.pull, WireType::kF16);
  EXPECT_NE(agreement.find("tables[1].wire=pull=fp32 push=bf16"), std::string::npos) << agreement;
  EXPECT_NE(agreement.find("tables[2].wire=pull=fp16 push=fp16"), std::string::npos) << agreement;
}

// Hashed tables on replicated shards under bsp with aggregation: the
// pending sums go to the backups by id, pushes one by one or each clock's
// sums once (replication.after_aggregation).
TEST(ConfigTest, HashedTablesAreReadWithReplicatedSums) {
  for (const char* after : {"false", "true"}) {
    SCOPED_TRACE(std::string("after_aggregation: ") + after);
    const std::string yaml =
        "cluster: { servers: [\"127.0.0.1:7000\", \"127.0.0.1:7001\"], workers: 2 }\n"
        "tables:\n"
        "  - { name: dense, rows: 4 }\n"
        "  - { name: h, keys: hashed, max_rows: 5, admit: { min_pushes: 2 },\n"
        "      evict: { policy: lru } }\n"
        "consistency: { mode: bsp, aggregate: true }\n"
        "replication: { factor: 2, port_offset: 100, after_aggregation: " +
        std::string(after) + " }\n";
    StatusOr<JobOptions> job = LoadJobString(yaml, "mem");
    ASSERT_OK(job);
    EXPECT_TRUE(job->tables[1].hashed());
    EXPECT_EQ(job->replication.factor, 2u);
    EXPECT_TRUE(job->consistency.aggregate);
    EXPECT_EQ(job->replication.after_aggregation, std::string(after) == "true");
  }
}

TEST(ConfigTest, BadHashedTablesAreRejectedNamingTheKey) {
  const std::string two_servers = "[\"127.0.0.1:7000\", \"127.0.0.1:7001\"]";
  struct Case {
    std::string table;
    std::string extra;  // top-level sections
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {"keys: hashed, dim: 2", "", {"tables[1]: a hashed table without a memory bound",
                                    "max_rows", "max_mb"}},
      {"keys: hashed, max_rows: 5, max_mb: 5", "", {"tables[1]: both max_rows and max_mb"}},
      {"keys: hashed, rows: 10, max_rows: 5", "",
       {"tables[1].rows: got 10 for a table of keys: hashed", "first push"}},
      {"keys: hashed, max_rows: 0", "", {"without a memory bound"}},
      {"keys: hashed, max_rows: 5000000000", "", {"tables[1].max_rows", "at most 4294967294"}},
      {"keys: hashed, max_mb: 5, slots: 2000000", "", {"tables[1].slots: got 2000000"}},
      {"keys: hashed, max_mb: 5, slots: 1", "",
       {"tables[1].slots: got 1 for 2 servers", "at least one slot per server"}},
      {"rows: 10, max_rows: 5", "",
       {"tables[1].max_rows: got 5 for a table of keys: range", "only for keys: hashed"}},
      {"rows: 10, slots: 8", "", {"tables[1].slots: got 8 for a table of keys: range"}},
      {"keys: sorted, max_rows: 5", "", {"tables[1].keys", "range, hashed"}},
      {"keys: hashed", "", {"tables[1]: a hashed table without a memory bound"}},
      {"max_rows: 5", "", {"tables[1].rows: missing required key", "keys: hashed"}},
      {"rows: 10, admit: { min_pushes: 2 }", "",
       {"tables[1].admit: set on a table of keys: range", "only for keys: hashed"}},
      {"keys: hashed, max_rows: 5, admit: { min_pushes: 70000 }", "",
       {"tables[1].admit.min_pushes: got 70000", "at most 65535"}},
      {"keys: hashed, max_rows: 5, admit: { probability: 0 }", "",
       {"tables[1].admit.probability: got 0", "(0, 1]"}},
      {"keys: hashed, max_rows: 5, admit: { sketch_width: 3000 }", "",
       {"tables[1].admit.sketch_width: got 3000", "a power of two"}},
      {"keys: hashed, max_rows: 5, admit: { min_push: 2 }", "", {"tables[1].admit.min_push"}},
      {"rows: 10, evict: { policy: lru }", "",
       {"tables[1].evict: set on a table of keys: range", "only for keys: hashed"}},
      {"keys: hashed, max_rows: 5, evict: { policy: fifo }", "",
       {"tables[1].evict.policy", "none, lru, lfu"}},
      {"keys: hashed, max_rows: 5, evict: { idle_clocks: -1 }", "", {"tables[1].evict.idle_clocks"}},
      {"keys: hashed, max_rows: 5, evict: lru", "", {"tables[1].evict", "policy (none, lru or lfu)"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.table + " / " + c.extra);
    const std::string yaml = "cluster: { servers: " + two_servers +
                             ", workers: 1 }\n"
                             "tables:\n"
                             "  - { name: a, rows: 4 }\n"
                             "  - { name: h, " +
                             c.table + " }\n" + c.extra;
    StatusOr<JobOptions> job = LoadJobString(yaml, "mem");
    ASSERT_FALSE(job.ok());
    EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument);
    for (const std::string& part : c.parts) {
      EXPECT_NE(job.status().message().find(part), std::string::npos)
          << "lacks \"" << part << "\": " << job.status().message();
    }
  }
}

TEST(ConfigTest, AcceptsYamlCoreNumberForms) {
  StatusOr<JobOptions> job =
      LoadJobString(JobYamlWithTable("name: w, rows: +64, dim: !!int 2,"
                                     " init: { type: constant, value: -.5 },"
                                     " optimizer: { lr: 1e-3 }"),
                    "mem");
  ASSERT_OK(job);
  EXPECT_EQ(job->tables[0].rows, 64u);
  EXPECT_EQ(job->tables[0].dim, 2u);
  EXPECT_FLOAT_EQ(job->tables[0].init.value, -0.5f);
  EXPECT_FLOAT_EQ(job->tables[0].optimizer.lr, 1e-3f);
}

TEST(ConfigTest, EmptySourceOmitsThePrefix) {
  StatusOr<JobOptions> job =
      LoadJobString(JobYamlWithTable("name: w, rows: 0"), "");
  ASSERT_FALSE(job.ok());
  EXPECT_TRUE(StartsWith(job.status().message(), "tables[0].rows: "))
      << job.status().message();
}

TEST(ConfigTest, LoaderErrorsNameLineAndColumn) {
  // rows is on line 3; its value starts at column 23.
  StatusOr<JobOptions> job =
      LoadJobString(JobYamlWithTable("name: w, rows: -1"), "mem");
  EXPECT_TRUE(InvalidWith(job.status(), {"mem: tables[0].rows: ", "line 3"}));
}

TEST(ConfigTest, InfiniteLearningRateIsRejected) {
  StatusOr<JobOptions> job = LoadJobString(
      JobYamlWithTable("name: w, rows: 4, optimizer: { lr: .inf }"), "mem");
  EXPECT_TRUE(InvalidWith(job.status(), {"tables[0].optimizer.lr", "inf"}));
}

TEST(ConfigTest, HexIntegerIsRejected) {
  StatusOr<JobOptions> job =
      LoadJobString(JobYamlWithTable("name: w, rows: 0x40"), "mem");
  EXPECT_TRUE(InvalidWith(job.status(), {"tables[0].rows", "0x40"}));
}

TEST(ConfigTest, TooSmallFloatIsRejectedRatherThanRoundedToZero) {
  StatusOr<JobOptions> job = LoadJobString(
      JobYamlWithTable("name: w, rows: 4, optimizer: { lr: 1e-60 }"), "mem");
  EXPECT_TRUE(InvalidWith(job.status(), {"tables[0].optimizer.lr", "small"}));
}

TEST(ConfigTest, NumericKeyValuesAreAcceptedAsStrings) {
  // A table name or a host that YAML reads as a number is still a string.
  StatusOr<JobOptions> job =
      LoadJobString(JobYamlWithTable("name: 123, rows: 4"), "mem");
  ASSERT_OK(job);
  EXPECT_EQ(job->tables[0].name, "123");
}

TEST(ConfigTest, ListItemOfWrongTypeNamesItsIndex) {
  StatusOr<JobOptions> job = LoadJobString(
      JobYaml("[\"127.0.0.1:7000\", [\"127.0.0.1:7001\"]]"), "mem");
  EXPECT_TRUE(InvalidWith(job.status(), {"cluster.servers[1]", "a list"}));
}

TEST(ConfigTest, NonScalarKeyIsRejected) {
  StatusOr<JobOptions> job =
      LoadJobString(JobYaml("[\"127.0.0.1:7000\"]", "? [a, b]\n: 1\n"), "mem");
  EXPECT_TRUE(InvalidWith(job.status(), {"mem: (top level)", "key"}));
}

// ---------------------------------------------------------------------------
// Reading files

TEST(ConfigTest, LoadJobFileSetsSourceToThePath) {
  const std::string path = kConfigDir + "/single.yaml";
  StatusOr<JobOptions> job = LoadJobFile(path);
  ASSERT_OK(job);
  EXPECT_EQ(job->source, path);
}

TEST(ConfigTest, MissingFileIsNotFoundNamingThePath) {
  const std::string path = kBadDir + "/does_not_exist.yaml";
  StatusOr<JobOptions> job = LoadJobFile(path);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(job.status().message(), path)) << job.status().message();
}

TEST(ConfigTest, DirectoryIsInvalidArgumentNamingThePath) {
  StatusOr<JobOptions> job = LoadJobFile(kBadDir);
  EXPECT_TRUE(InvalidWith(job.status(), {kBadDir, "directory"}));
}

TEST(ConfigTest, EveryBadFileIsInvalidArgumentNamingTheFile) {
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kBadDir)) {
    const std::string name = entry.path().filename().string();
    if (!StartsWith(name, "bad_") || entry.path().extension() != ".yaml") {
      continue;
    }
    EXPECT_TRUE(BadFileRejected(name, {})) << name;
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

// ---------------------------------------------------------------------------
// Bad files, one per error class

TEST(ConfigTest, SyntaxErrorNamesLineAndColumn) {
  EXPECT_TRUE(BadFileRejected("bad_syntax.yaml",
                              {"YAML syntax error", "line ", "column "}));
}

TEST(ConfigTest, TabIndentationIsSyntaxError) {
  EXPECT_TRUE(
      BadFileRejected("bad_tab_indent.yaml", {"YAML syntax error", "line 2"}));
}

TEST(ConfigTest, UndefinedAliasIsSyntaxError) {
  EXPECT_TRUE(BadFileRejected("bad_undefined_alias.yaml",
                              {"YAML syntax error", "line 3"}));
}

TEST(ConfigTest, UnknownKeyNamesItsPathAndTheAllowedKeys) {
  EXPECT_TRUE(BadFileRejected("bad_unknown_key.yaml",
                              {"tables[0].rowz: unknown key",
                               "name, keys, rows, dim, max_rows, max_mb, slots, admit, evict, init, optimizer", "line 5"}));
}

TEST(ConfigTest, UnknownTopLevelKeyListsTheTopLevelKeys) {
  EXPECT_TRUE(
      BadFileRejected("bad_unknown_top_level_key.yaml",
                      {"consistancy: unknown key",
                       "cluster, tables, consistency, liveness, rendezvous, stragglers, optimizer, "
                       "server, client, worker, train"}));
}

// ---------------------------------------------------------------------------
// Sections of other layers (the train section)

TEST(ConfigTest, TrainSectionIsSkippedWithoutItsReader) {
  // Common does not know the train schema: not even an unknown program or
  // key there stops a loader that was given no reader for it.
  StatusOr<JobOptions> job = LoadJobString(
      JobYaml("[\"127.0.0.1:7000\"]", "train: { program: word2vec, no_such_key: [1, 2] }\n"),
      "mem");
  ASSERT_OK(job);
  EXPECT_EQ(job->tables.size(), 1u);
}

TEST(ConfigTest, EverySectionOfAnotherLayerIsAllowed) {
  for (std::string_view key : kJobSectionsOfOtherLayers) {
    SCOPED_TRACE(std::string(key));
    EXPECT_OK(LoadJobString(JobYaml("[\"127.0.0.1:7000\"]", std::string(key) + ": {}\n"), "mem"));
  }
}

TEST(ConfigTest, UnknownTopLevelKeyIsRefusedBesideATrainSection) {
  StatusOr<JobOptions> job = LoadJobString(
      JobYaml("[\"127.0.0.1:7000\"]", "train: { features: 64 }\ntrian: { features: 64 }\n"),
      "mem");
  EXPECT_TRUE(InvalidWith(job.status(), {"mem: trian: unknown key", "worker, train, checkpoint",
                                         "line 5"}));
}

TEST(ConfigTest, SectionReaderGetsItsSectionAndItsErrorIsTheLoaders) {
  int calls = 0;
  const JobSection train[] = {{"train", [&](const YamlReader& r, const YamlValue& value) {
                                 ++calls;
                                 return r.Error(value, "got the train section", "a test");
                               }}};
  StatusOr<JobOptions> job =
      LoadJobString(JobYaml("[\"127.0.0.1:7000\"]", "train: { features: 64 }\n"), "mem", train);
  EXPECT_TRUE(InvalidWith(job.status(), {"mem: train: got the train section; expected a test",
                                         "line 4"}));
  EXPECT_EQ(calls, 1);
  // Not called when the document has no such section.
  ASSERT_OK(LoadJobString(JobYaml(), "mem", train));
  EXPECT_EQ(calls, 1);
}

TEST(ConfigTest, SectionReaderForAKeyOfCommonOrTwiceIsAnInternalError) {
  const auto read = [](const YamlReader&, const YamlValue&) { return Status::Ok(); };
  const JobSection cluster[] = {{"cluster", read}};
  StatusOr<JobOptions> job = LoadJobString(JobYaml(), "mem", cluster);
  EXPECT_EQ(job.status().code(), StatusCode::kInternal) << job.status().ToString();
  EXPECT_TRUE(Contains(job.status().message(), "kJobSectionsOfOtherLayers"))
      << job.status().ToString();
  const JobSection twice[] = {{"train", read}, {"train", read}};
  job = LoadJobString(JobYaml(), "mem", twice);
  EXPECT_EQ(job.status().code(), StatusCode::kInternal) << job.status().ToString();
}

TEST(ConfigTest, DuplicateKeyIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_duplicate_key.yaml",
                              {"tables[0].rows: duplicate key", "line 4"}));
}

TEST(ConfigTest, StringWhereNumberExpectedIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_wrong_type_string_for_number.yaml",
                              {"tables[0].rows", "sixty-four", "integer"}));
}

TEST(ConfigTest, QuotedNumberIsAStringAndRejected) {
  EXPECT_TRUE(BadFileRejected("bad_wrong_type_quoted_number.yaml",
                              {"cluster.workers", "quoted string"}));
}

TEST(ConfigTest, MapWhereListExpectedIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_wrong_type_map_for_list.yaml",
                              {"tables: got a map", "list"}));
}

TEST(ConfigTest, StringWhereListExpectedIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_wrong_type_string_for_list.yaml",
                              {"cluster.servers: got", "list"}));
}

TEST(ConfigTest, FloatWhereIntegerExpectedIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_float_for_integer.yaml",
                              {"tables[0].dim", "not a whole number"}));
}

TEST(ConfigTest, IntegerThatOverflows64BitsIsRejected) {
  EXPECT_TRUE(BadFileRejected(
      "bad_integer_overflow.yaml",
      {"tables[0].rows", "too large", "0..18446744073709551615"}));
}

TEST(ConfigTest, IntegerThatOverflows32BitsIsRejected) {
  EXPECT_TRUE(BadFileRejected(
      "bad_uint32_overflow.yaml",
      {"client.request_timeout_ms", "too large", "0..4294967295"}));
}

TEST(ConfigTest, FloatThatOverflowsFloat32IsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_float_overflow.yaml",
                              {"tables[0].optimizer.lr", "too large"}));
}

TEST(ConfigTest, NegativeNumberForUnsignedFieldIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_negative_number.yaml",
                              {"server.max_keys_per_request", "negative"}));
}

TEST(ConfigTest, NonBooleanIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_bool.yaml",
                              {"cluster.allow_remote", "true or false"}));
}

TEST(ConfigTest, MissingRequiredKeyIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_missing_required_rows.yaml",
                              {"tables[0].rows: missing required key"}));
}

TEST(ConfigTest, MissingClusterIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_missing_cluster.yaml",
                              {"cluster: missing required key"}));
}

TEST(ConfigTest, MissingWorkersIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_missing_workers.yaml",
                              {"cluster.workers: missing required key"}));
}

TEST(ConfigTest, EmptyValueIsRejectedNotDefaulted) {
  EXPECT_TRUE(BadFileRejected("bad_empty_value.yaml",
                              {"tables[0].rows", "empty value", "line 4"}));
}

TEST(ConfigTest, UnknownOptimizerTypeListsTheAllowedTypes) {
  EXPECT_TRUE(BadFileRejected(
      "bad_unknown_enum.yaml",
      {"tables[0].optimizer.type", "\"rmsprop\"", "one of sgd, add, adagrad, adam"}));
}

TEST(ConfigTest, UnknownInitTypeListsTheAllowedTypes) {
  EXPECT_TRUE(BadFileRejected("bad_unknown_init_type.yaml",
                              {"tables[0].init.type", "\"gaussian\"",
                               "one of zeros, constant, uniform, normal"}));
}

TEST(ConfigTest, InitKeyNotUsedByItsTypeIsRejected) {
  EXPECT_TRUE(
      BadFileRejected("bad_key_not_valid_for_type.yaml",
                      {"tables[0].init.seed", "not used by init type constant",
                       "only the keys type, value"}));
}

TEST(ConfigTest, LearningRateWithAddOptimizerIsRejected) {
  EXPECT_TRUE(BadFileRejected(
      "bad_lr_for_add.yaml",
      {"tables[0].optimizer.lr", "not used by optimizer type add"}));
}

TEST(ConfigTest, EmptyServerListIsRejected) {
  EXPECT_TRUE(
      BadFileRejected("bad_no_servers.yaml", {"cluster.servers: no servers"}));
}

TEST(ConfigTest, DuplicateEndpointsAreRejected) {
  EXPECT_TRUE(BadFileRejected("bad_duplicate_endpoints.yaml",
                              {"cluster.servers[2]", "cluster.servers[0]"}));
}

TEST(ConfigTest, PortOutOfRangeIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_malformed_endpoint.yaml",
                              {"cluster.servers[1]", "70000", "1..65535"}));
}

TEST(ConfigTest, Ipv6WithoutBracketsIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_ipv6_without_brackets.yaml",
                              {"cluster.servers[0]", "[::1]:7000"}));
}

TEST(ConfigTest, NonLoopbackHostNeedsAllowRemote) {
  EXPECT_TRUE(BadFileRejected(
      "bad_non_loopback_host.yaml",
      {"cluster.servers[0]", "10.0.0.5", "cluster.allow_remote: true"}));
}

TEST(ConfigTest, CurveWithoutAKeysFolderSaysHowToMakeOne) {
  EXPECT_TRUE(BadFileRejected("bad_security_curve_without_keys.yaml",
                              {"security.keys_dir", "missing under mode curve", "ps_ctl keygen"}));
}

TEST(ConfigTest, UnknownSecurityModeListsTheModes) {
  EXPECT_TRUE(BadFileRejected("bad_security_mode.yaml",
                              {"security.mode", "\"tls\"", "one of none, curve"}));
}

TEST(ConfigTest, KeysFolderWithoutCurveIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_security_keys_without_curve.yaml",
                              {"security.keys_dir", "security.mode is none"}));
}

TEST(ConfigTest, KeyTextInTheJobFileIsRejected) {
  // The job file names a folder of key files, never a key.
  EXPECT_TRUE(BadFileRejected("bad_security_key_text.yaml",
                              {"security", "server_secret_key", "keys_dir"}));
}

TEST(ConfigTest, ReplicationFactorAboveTheServersIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_replication_factor.yaml",
                              {"replication.factor", "got 3 with 2 servers", "line 4"}));
}

TEST(ConfigTest, BackupPortsThatClashAreRejectedNamingBoth) {
  // Shard 0's backup would be at server 1's port + 1: server 2's port.
  EXPECT_TRUE(BadFileRejected("bad_replication_port_clash.yaml",
                              {"replication.port_offset", "backup 1 of shard 0",
                               "127.0.0.1:7002", "cluster.servers[2]"}));
}

TEST(ConfigTest, UnknownReplicationKeyIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_replication_key.yaml", {"replication", "backups"}));
}

TEST(ConfigTest, ReplicationSectionIsRead) {
  auto job = LoadJobString(
      "cluster: { servers: [\"127.0.0.1:7000\", \"127.0.0.1:7001\"], workers: 1 }\n"
      "tables: [ { name: w, rows: 4 } ]\n"
      "replication: { factor: 2, port_offset: 50 }\n",
      "inline.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->replication.factor, 2u);
  EXPECT_EQ(job->replication.port_offset, 50u);
  auto plain = LoadJobString(
      "cluster: { servers: [\"127.0.0.1:7000\"], workers: 1 }\n"
      "tables: [ { name: w, rows: 4 } ]\n",
      "inline.yaml");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->replication.factor, 1u);
}

TEST(ConfigTest, EtcdAuthorityIsRead) {
  auto job = LoadJobString(
      "cluster: { servers: [\"127.0.0.1:7000\", \"127.0.0.1:7001\"], workers: 1 }\n"
      "tables: [ { name: w, rows: 4 } ]\n"
      "replication:\n"
      "  factor: 2\n"
      "  authority: etcd\n"
      "  etcd: { endpoints: [\"10.0.0.5:2379\", \"etcd-1:2379\"], prefix: /ps/run7,"
      " lease_ttl_s: 3, request_timeout_ms: 250 }\n",
      "inline.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->replication.authority, ReplicationAuthority::kEtcd);
  EXPECT_EQ(job->replication.etcd.endpoints,
            (std::vector<std::string>{"10.0.0.5:2379", "etcd-1:2379"}));
  EXPECT_EQ(job->replication.etcd.prefix, "/ps/run7");
  EXPECT_EQ(job->replication.etcd.lease_ttl_s, 3u);
  EXPECT_EQ(job->replication.etcd.request_timeout_ms, 250u);
  auto defaults = LoadJobString(
      "cluster: { servers: [\"127.0.0.1:7000\", \"127.0.0.1:7001\"], workers: 1 }\n"
      "tables: [ { name: w, rows: 4 } ]\n"
      "replication: { factor: 2 }\n",
      "inline.yaml");
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->replication.authority, ReplicationAuthority::kLauncher);
  EXPECT_EQ(defaults->replication.etcd.lease_ttl_s, 2u);
}

TEST(ConfigTest, BadEtcdAuthoritySettingsAreRejectedNamingThePath) {
  const std::string head =
      "cluster: { servers: [\"127.0.0.1:7000\", \"127.0.0.1:7001\"], workers: 1 }\n"
      "tables: [ { name: w, rows: 4 } ]\n";
  struct Case {
    std::string replication;
    std::vector<std::string> named;
  };
  const std::vector<Case> cases = {
      {"{ factor: 2, authority: etcd }", {"replication.etcd.endpoints", "missing or empty"}},
      {"{ factor: 2, authority: zookeeper }", {"replication.authority", "zookeeper"}},
      {"{ factor: 2, authority: etcd, etcd: { endpoints: [\"etcd\"] } }",
       {"replication.etcd.endpoints[0]", "etcd"}},
      {"{ factor: 2, authority: etcd, etcd: { endpoints: [\"e:2379\"], lease_ttl_s: 0 } }",
       {"replication.etcd.lease_ttl_s", "got 0"}},
      {"{ factor: 2, authority: etcd, etcd: { endpoints: [\"e:2379\"], lease_ttl_s: 1,"
       " request_timeout_ms: 1000 } }",
       {"replication.etcd.request_timeout_ms", "below lease_ttl_s"}},
      {"{ factor: 2, authority: etcd, etcd: { endpoints: [\"e:2379\"], prefix: ps } }",
       {"replication.etcd.prefix", "starts with '/'"}},
      {"{ factor: 2, etcd: { endpoints: [\"e:2379\"] } }",
       {"replication.etcd", "authority is launcher"}},
      {"{ factor: 1, authority: etcd, etcd: { endpoints: [\"e:2379\"] } }",
       {"replication.authority", "factor 1"}},
      {"{ factor: 2, authority: etcd, etcd: { endpoints: [\"e:2379\"], ttl: 3 } }",
       {"replication.etcd", "ttl"}},
  };
  for (const Case& c : cases) {
    auto job = LoadJobString(head + "replication: " + c.replication + "\n", "inline.yaml");
    ASSERT_FALSE(job.ok()) << c.replication;
    EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument) << c.replication;
    for (const std::string& part : c.named) {
      EXPECT_NE(job.status().message().find(part), std::string::npos)
          << c.replication << ": " << job.status().message() << " does not name " << part;
    }
  }
}

TEST(ConfigTest, MetricsSectionIsReadAndGivesEachProcessAPort) {
  auto job = LoadJobString(
      "cluster: { servers: [\"127.0.0.1:7000\", \"127.0.0.1:7001\"], workers: 3 }\n"
      "tables: [ { name: w, rows: 4 } ]\n"
      "replication: { factor: 2 }\n"
      "metrics: { port: 9100, bind: 0.0.0.0, interval_ms: 250, linger_ms: 5000 }\n",
      "inline.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->metrics.port, 9100u);
  EXPECT_EQ(job->metrics.bind, "0.0.0.0");
  EXPECT_EQ(job->metrics.interval_ms, 250u);
  EXPECT_EQ(job->metrics.linger_ms, 5000u);
  // Shards first, then workers, then the backups: one port each.
  EXPECT_EQ(ServerMetricsPort(*job, 0, 0), 9100u);
  EXPECT_EQ(ServerMetricsPort(*job, 1, 0), 9101u);
  EXPECT_EQ(WorkerMetricsPort(*job, 0), 9102u);
  EXPECT_EQ(WorkerMetricsPort(*job, 2), 9104u);
  EXPECT_EQ(ServerMetricsPort(*job, 0, 1), 9105u);
  EXPECT_EQ(ServerMetricsPort(*job, 1, 1), 9106u);
  EXPECT_EQ(MaxMetricsPortOffset(*job), 6u);
  EXPECT_FALSE(job->cluster.evaluator);
  // The evaluator after every other process.
  auto evaluated = LoadJobString(
      "cluster: { servers: [\"127.0.0.1:7000\", \"127.0.0.1:7001\"], workers: 3, "
      "evaluator: true }\n"
      "tables: [ { name: w, rows: 4 } ]\n"
      "replication: { factor: 2 }\n"
      "metrics: { port: 9100 }\n",
      "inline.yaml");
  ASSERT_TRUE(evaluated.ok()) << evaluated.status().ToString();
  EXPECT_TRUE(evaluated->cluster.evaluator);
  EXPECT_EQ(WorkerMetricsPort(*evaluated, kEvaluatorWorker), 9107u);
  EXPECT_EQ(MaxMetricsPortOffset(*evaluated), 7u);
  auto crowded = LoadJobString(
      "cluster: { servers: [\"127.0.0.1:7000\"], workers: 1, evaluator: true }\n"
      "tables: [ { name: w, rows: 4 } ]\n"
      "metrics: { port: 65534 }\n",
      "inline.yaml");
  EXPECT_EQ(crowded.status().code(), StatusCode::kInvalidArgument)
      << "shard 65534, worker 65535, the evaluator would need 65536";
  auto off = LoadJobString(
      "cluster: { servers: [\"127.0.0.1:7000\"], workers: 1 }\n"
      "tables: [ { name: w, rows: 4 } ]\n",
      "inline.yaml");
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->metrics.port, 0u);
  EXPECT_EQ(off->metrics.bind, "127.0.0.1");
  EXPECT_EQ(ServerMetricsPort(*off, 0, 0), 0u);
  EXPECT_EQ(WorkerMetricsPort(*off, 0), 0u);
}

TEST(ConfigTest, BadMetricsSettingsAreRejectedNamingThePath) {
  const std::string head =
      "cluster: { servers: [\"127.0.0.1:7000\", \"127.0.0.1:7001\"], workers: 2 }\n"
      "tables: [ { name: w, rows: 4 } ]\n";
  struct Case {
    std::string metrics;
    std::vector<std::string> named;
  };
  const std::vector<Case> cases = {
      {"{ port: 65534 }", {"metrics.port", "up to port 65537"}},
      {"{ port: 6998 }", {"metrics.port", "127.0.0.1:7000", "shard 0"}},
      {"{ port: 9100, interval_ms: 10 }", {"metrics.interval_ms", "got 10", "50..60000"}},
      {"{ port: 9100, linger_ms: 700000 }", {"metrics.linger_ms", "got 700000"}},
      {"{ port: 9100, bind: \"\" }", {"metrics.bind", "empty"}},
      {"{ port: -1 }", {"metrics.port"}},
      {"{ port: 9100, interval: 5 }", {"metrics", "interval"}},
  };
  for (const Case& c : cases) {
    auto job = LoadJobString(head + "metrics: " + c.metrics + "\n", "inline.yaml");
    ASSERT_FALSE(job.ok()) << c.metrics;
    EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument) << c.metrics;
    for (const std::string& part : c.named) {
      EXPECT_NE(job.status().message().find(part), std::string::npos)
          << c.metrics << ": " << job.status().message() << " does not name " << part;
    }
  }
}

TEST(ConfigTest, BalanceAddsTheRatesTableAndIsRefusedUnderAspOrWithAReservedName) {
  const std::string head =
      "cluster: { servers: [\"127.0.0.1:7000\"], workers: 3 }\n"
      "tables: [ { name: w, rows: 4 } ]\n";
  auto job = LoadJobString(
      head + "consistency: { mode: ssp, staleness: 2 }\n"
             "stragglers: { balance: true, balance_window: 5 }\n",
      "inline.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_TRUE(job->stragglers.balance);
  EXPECT_EQ(job->stragglers.balance_window, 5u);
  ASSERT_EQ(job->tables.size(), 2u);
  EXPECT_EQ(job->tables[1].name, kBalanceTableName);
  EXPECT_EQ(job->tables[1].rows, 3u);
  EXPECT_EQ(job->tables[1].dim, 1u);
  EXPECT_EQ(job->tables[1].optimizer.kind, OptimizerKind::kAdd);
  auto plain = LoadJobString(head, "inline.yaml");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->tables.size(), 1u);
  EXPECT_EQ(plain->stragglers.balance_window, 10u);

  auto asp = LoadJobString(head + "consistency: { mode: asp }\nstragglers: { balance: true }\n",
                           "inline.yaml");
  ASSERT_FALSE(asp.ok());
  EXPECT_NE(asp.status().message().find("stragglers.balance"), std::string::npos);
  EXPECT_NE(asp.status().message().find("asp"), std::string::npos);
  auto window = LoadJobString(
      head + "consistency: { mode: bsp }\nstragglers: { balance: true, balance_window: 0 }\n",
      "inline.yaml");
  ASSERT_FALSE(window.ok());
  EXPECT_NE(window.status().message().find("stragglers.balance_window: got 0"),
            std::string::npos);
  auto reserved = LoadJobString(
      "cluster: { servers: [\"127.0.0.1:7000\"], workers: 3 }\n"
      "tables: [ { name: w, rows: 4 }, { name: _ps_balance, rows: 3 } ]\n",
      "inline.yaml");
  ASSERT_FALSE(reserved.ok());
  EXPECT_NE(reserved.status().message().find("tables[1].name"), std::string::npos);
  EXPECT_NE(reserved.status().message().find("reserved"), std::string::npos);
}

TEST(ConfigTest, SecuritySectionIsRead) {
  auto job = LoadJobString(
      "cluster: { servers: [\"127.0.0.1:7000\"], workers: 1 }\n"
      "tables: [ { name: w, rows: 4 } ]\n"
      "security: { mode: curve, keys_dir: /etc/ps/keys }\n",
      "inline.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->security.mode, SecurityMode::kCurve);
  EXPECT_EQ(job->security.keys_dir, "/etc/ps/keys");
  auto plain = LoadJobString(
      "cluster: { servers: [\"127.0.0.1:7000\"], workers: 1 }\n"
      "tables: [ { name: w, rows: 4 } ]\n",
      "inline.yaml");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->security.mode, SecurityMode::kNone);
}

TEST(ConfigTest, ZeroWorkersIsRejected) {
  EXPECT_TRUE(
      BadFileRejected("bad_zero_workers.yaml", {"cluster.workers: got 0"}));
}

TEST(ConfigTest, EmptyTableListIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_no_tables.yaml", {"tables: no tables"}));
}

TEST(ConfigTest, ZeroRowsIsRejected) {
  EXPECT_TRUE(
      BadFileRejected("bad_zero_rows.yaml", {"tables[1].rows: got 0", ">= 1"}));
}

TEST(ConfigTest, ZeroDimIsRejected) {
  EXPECT_TRUE(
      BadFileRejected("bad_zero_dim.yaml", {"tables[0].dim: got 0", ">= 1"}));
}

TEST(ConfigTest, TableTooLargeToAddressIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_table_size_overflow.yaml",
                              {"tables[1]: ", "overflow"}));
}

TEST(ConfigTest, DuplicateTableNameIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_duplicate_table_name.yaml",
                              {"tables[1].name", "tables[0]", "unique"}));
}

TEST(ConfigTest, TableNameWithSpaceIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_table_name_chars.yaml",
                              {"tables[0].name", "\"my weights\""}));
}

TEST(ConfigTest, ZeroLearningRateIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_zero_lr.yaml",
                              {"tables[0].optimizer.lr: got 0", "> 0"}));
}

TEST(ConfigTest, BadJobWideLearningRateNamesTheJobWidePath) {
  const std::string path = kBadDir + "/bad_job_optimizer_lr.yaml";
  EXPECT_TRUE(BadFileRejected("bad_job_optimizer_lr.yaml",
                              {path + ": optimizer.lr: got -0.1", "line 2"}));
}

TEST(ConfigTest, ValuesValidateRefusesNameTheirLineInALoadedFile) {
  // Checked once, by Validate(); the loader adds where the value is.
  EXPECT_TRUE(BadFileRejected("bad_negative_init_scale.yaml",
                              {"tables[0].init.scale: got -0.5", "(line "}));
  EXPECT_TRUE(BadFileRejected("bad_consistency_ssp_zero_staleness.yaml",
                              {"consistency.staleness: got 0", "line 4"}));
}

TEST(ConfigTest, ClusterBindIsAddressOrAllAndAllNeedsAllowRemote) {
  const std::string tables = "tables: [ { name: w, rows: 4 } ]\n";
  auto job = LoadJobString("cluster: { servers: [\"localhost:7000\"], workers: 1 }\n" + tables,
                           "mem");
  ASSERT_OK(job);
  EXPECT_EQ(job->cluster.bind, BindMode::kAddress);
  job = LoadJobString(
      "cluster: { servers: [\"localhost:7000\"], workers: 1, bind: all }\n" + tables, "mem");
  EXPECT_TRUE(InvalidWith(job.status(), {"mem: cluster.bind", "allow_remote", "line 1"}));
  job = LoadJobString("cluster: { servers: [\"localhost:7000\"], workers: 1, bind: all,\n"
                      "           allow_remote: true }\n" + tables,
                      "mem");
  ASSERT_OK(job);
  EXPECT_EQ(job->cluster.bind, BindMode::kAll);
  job = LoadJobString(
      "cluster: { servers: [\"localhost:7000\"], workers: 1, bind: everywhere }\n" + tables,
      "mem");
  EXPECT_TRUE(InvalidWith(job.status(), {"mem: cluster.bind: got \"everywhere\"", "address, all"}));
}

TEST(ConfigTest, TheJobWideOptimizerIsCheckedUnderItsOwnPath) {
  const std::string head = "cluster: { servers: [\"127.0.0.1:7000\"], workers: 1 }\n";
  auto job = LoadJobString(head + "optimizer: { type: sgd, lr: 0.1, momentum: 1.5 }\n"
                                  "tables: [ { name: w, rows: 4 } ]\n",
                           "mem");
  EXPECT_TRUE(InvalidWith(job.status(), {"mem: optimizer.momentum: got 1.5", "line 2"}));
  // Refused even where every table has an optimizer of its own.
  job = LoadJobString(head + "optimizer: { type: sgd, lr: 0 }\n"
                             "tables: [ { name: w, rows: 4, optimizer: { lr: 0.1 } } ]\n",
                      "mem");
  EXPECT_TRUE(InvalidWith(job.status(), {"mem: optimizer.lr: got 0"}));
  // And in a job built in code.
  JobOptions built = TestJob().Build();
  built.optimizer.lr = -1.0f;
  EXPECT_TRUE(InvalidWith(built.Validate(), {"optimizer.lr: got -1"}));
}

TEST(ConfigTest, NegativeUniformScaleIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_negative_init_scale.yaml",
                              {"tables[0].init.scale: got -0.5", ">= 0"}));
}

TEST(ConfigTest, NanStddevIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_nan_stddev.yaml",
                              {"tables[0].init.stddev: got nan", "finite"}));
}

TEST(ConfigTest, MaxRequestBytesBelow1024IsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_small_max_request_bytes.yaml",
                              {"server.max_request_bytes: got 1023", "1024"}));
}

TEST(ConfigTest, BadServerClockAndResultSettingsAreRejected) {
  EXPECT_TRUE(BadFileRejected("bad_server_max_resume_clocks.yaml",
                              {"server.max_resume_clocks: got 4611686018427387905", "2^62"}));
  EXPECT_TRUE(BadFileRejected("bad_server_on_non_finite_result.yaml",
                              {"server.on_non_finite_result: got \"ignore\"", "refuse", "flag"}));
}

TEST(ConfigTest, IoThreadsAbove64IsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_io_threads.yaml",
                              {"client.io_threads: got 65", "1..64"}));
}

TEST(ConfigTest, PushPartBytesBelow4096IsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_push_part_bytes.yaml",
                              {"client.push_part_bytes: got 1000", ">= 4096"}));
}

TEST(ConfigTest, SocketHwmNotAboveMaxInFlightIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_server_socket_hwm.yaml",
                              {"server.socket_hwm: got 256 with client.max_in_flight 256",
                               "more messages than client.max_in_flight"}));
}

TEST(ConfigTest, MaxQueuedReplyBytesBelow1MiBIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_server_max_queued_reply_bytes.yaml",
                              {"server.max_queued_reply_bytes: got 4096", ">= 1048576"}));
}

TEST(ConfigTest, MaxWaitingPullsBelowMaxInFlightIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_server_max_waiting_pulls.yaml",
                              {"server.max_waiting_pulls_per_worker: got 10 with "
                               "client.max_in_flight 64"}));
}

TEST(ConfigTest, MaxPullWaitBelowRequestTimeoutIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_server_max_pull_wait_ms.yaml",
                              {"server.max_pull_wait_ms: got 5000 with client.request_timeout_ms "
                               "10000"}));
}

TEST(ConfigTest, ConsistencyModesLoadWithTheirBounds) {
  const std::string head =
      "cluster: { servers: [\"127.0.0.1:7000\"], workers: 2 }\n"
      "tables: [ { name: w, rows: 4 } ]\n";
  auto bsp = LoadJobString(head + "consistency: { mode: bsp }\n", "mem");
  ASSERT_OK(bsp);
  EXPECT_EQ(bsp->consistency.Bound(), 0);
  auto ssp = LoadJobString(head + "consistency: { mode: ssp, staleness: 3 }\n", "mem");
  ASSERT_OK(ssp);
  EXPECT_EQ(ssp->consistency.Bound(), 3);
  EXPECT_EQ(ConsistencyName(ssp->consistency), "ssp 3");
  auto asp = LoadJobString(head + "consistency: { mode: asp }\n", "mem");
  ASSERT_OK(asp);
  EXPECT_EQ(asp->consistency.Bound(), kUnboundedStaleness);
  auto absent = LoadJobString(head, "mem");
  ASSERT_OK(absent);
  EXPECT_EQ(absent->consistency.mode, ConsistencyMode::kAsp);
}

TEST(ConfigTest, UnknownConsistencyModeIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_consistency_unknown_mode.yaml",
                              {"consistency.mode: got \"sync\"", "bsp", "ssp", "asp"}));
}

TEST(ConfigTest, SspWithoutStalenessIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_consistency_ssp_without_staleness.yaml",
                              {"consistency.staleness", "staleness >= 1"}));
}

TEST(ConfigTest, SspWithZeroStalenessIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_consistency_ssp_zero_staleness.yaml",
                              {"consistency.staleness: got 0", "staleness >= 1"}));
}

TEST(ConfigTest, StalenessWithBspIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_consistency_staleness_with_bsp.yaml",
                              {"consistency.staleness: not used by mode bsp", "only with mode ssp"}));
}

TEST(ConfigTest, AggregateIsOnlyForBsp) {
  auto job = LoadJobString(
      "cluster: { servers: [\"127.0.0.1:7000\"], workers: 2 }\n"
      "tables: [ { name: w, rows: 4 } ]\n"
      "consistency: { mode: bsp, aggregate: true }\n",
      "mem");
  ASSERT_OK(job);
  EXPECT_TRUE(job->consistency.aggregate);
  EXPECT_TRUE(BadFileRejected("bad_consistency_aggregate_with_ssp.yaml",
                              {"consistency.aggregate: true with mode ssp 2", "only with mode bsp"}));
}

TEST(ConfigTest, BackupWorkersLoadAndAreCheckedAgainstTheModeAndTheWorkers) {
  const std::string head =
      "cluster: { servers: [\"127.0.0.1:7000\"], workers: 4 }\n"
      "tables: [ { name: w, rows: 4 } ]\n";
  auto job = LoadJobString(
      head + "consistency: { mode: bsp, aggregate: true, backup_workers: 1 }\n", "mem");
  ASSERT_OK(job);
  EXPECT_EQ(job->consistency.backup_workers, 1u);
  EXPECT_EQ(job->consistency.Quorum(4), 3u);
  // Part of the job every process must agree on.
  EXPECT_NE(EncodeAgreement(*job).find("backup_workers 1"), std::string::npos);
  struct Case {
    std::string yaml;
    std::vector<std::string> says;
  };
  const Case cases[] = {
      {"consistency: { mode: bsp, backup_workers: 1 }\n",
       {"consistency.backup_workers: got 1 with mode bsp without aggregate", "aggregate: true"}},
      {"consistency: { mode: ssp, staleness: 2, backup_workers: 1 }\n",
       {"consistency.backup_workers: got 1 with mode ssp 2", "only under mode bsp"}},
      {"consistency: { mode: bsp, aggregate: true, backup_workers: 4 }\n",
       {"consistency.backup_workers: got 4 with cluster.workers 4", "fewer than the workers"}},
      {"consistency: { mode: bsp, aggregate: true, backup_workers: 1 }\n"
       "stragglers: { balance: true }\n",
       {"consistency.backup_workers: got 1 with stragglers.balance: true", "one of the two"}},
      {"consistency: { mode: bsp, aggregate: true, backup_workers: -1 }\n",
       {"consistency.backup_workers"}},
  };
  for (const Case& c : cases) {
    auto bad = LoadJobString(head + c.yaml, "mem");
    ASSERT_FALSE(bad.ok()) << c.yaml;
    for (const std::string& part : c.says) {
      EXPECT_TRUE(Contains(bad.status().message(), part)) << bad.status().message();
    }
  }
}

TEST(ConfigTest, ConsistencyWithoutModeIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_consistency_missing_mode.yaml", {"consistency.mode"}));
}

TEST(ConfigTest, LivenessLoadsAndChecksItsTimeout) {
  const std::string head =
      "cluster: { servers: [\"127.0.0.1:7000\"], workers: 2 }\n"
      "tables: [ { name: w, rows: 4 } ]\n";
  auto job = LoadJobString(
      head + "liveness: { heartbeat_ms: 100, timeout_ms: 250, on_dead_worker: drop,\n"
             "            server_restarts: 3, server_down_timeout_ms: 4000,\n"
             "            reconnect_ms: 50 }\n",
      "mem");
  ASSERT_OK(job);
  EXPECT_EQ(job->liveness.server_restarts, 3u);
  EXPECT_EQ(job->liveness.reconnect_ms, 50u);
  EXPECT_EQ(job->liveness.server_down_timeout_ms, 4000u);
  EXPECT_EQ(job->liveness.heartbeat_ms, 100u);
  EXPECT_EQ(job->liveness.timeout_ms, 250u);
  EXPECT_EQ(job->liveness.on_dead_worker, DeadWorkerPolicy::kDrop);
  EXPECT_TRUE(BadFileRejected("bad_liveness_timeout_below_two_heartbeats.yaml",
                              {"liveness.timeout_ms: got 150", "twice liveness.heartbeat_ms (100)"}));
  EXPECT_TRUE(BadFileRejected("bad_liveness_policy.yaml",
                              {"liveness.on_dead_worker: got \"ignore\"", "fail", "drop"}));
  EXPECT_TRUE(BadFileRejected("bad_liveness_server_down_timeout.yaml",
                              {"liveness.server_down_timeout_ms: got 0", "at least 1 ms"}));
  EXPECT_TRUE(BadFileRejected("bad_liveness_reconnect.yaml",
                              {"liveness.reconnect_ms: got 0",
                               "1 to liveness.server_down_timeout_ms (60000) ms"}));
  EXPECT_TRUE(BadFileRejected("bad_liveness_reconnect_above_down_timeout.yaml",
                              {"liveness.reconnect_ms: got 3000",
                               "1 to liveness.server_down_timeout_ms (2000) ms"}));
  EXPECT_TRUE(BadFileRejected("bad_liveness_reconnect_above_int.yaml",
                              {"liveness.reconnect_ms: got 3000000000", "1 to 2147483647 ms"}));
}

TEST(ConfigTest, StragglersLoadAndAreChecked) {
  const std::string head =
      "cluster: { servers: [\"127.0.0.1:7000\"], workers: 4 }\n"
      "tables: [ { name: w, rows: 4 } ]\n";
  auto job = LoadJobString(head + "stragglers: { slow_worker: 3, slow_factor: 3, "
                                  "pause_probability: 0.05, pause_steps: [1, 3], seed: 7, "
                                  "step_ms: 2.5 }\n",
                           "mem");
  ASSERT_OK(job);
  EXPECT_EQ(job->stragglers.slow_worker, 3);
  EXPECT_EQ(job->stragglers.slow_factor, 3.0);
  EXPECT_FLOAT_EQ(static_cast<float>(job->stragglers.pause_probability), 0.05f);
  EXPECT_EQ(job->stragglers.pause_max_steps, 3u);
  EXPECT_EQ(job->stragglers.seed, 7u);
  EXPECT_EQ(job->stragglers.step_ms, 2.5);
  EXPECT_TRUE(BadFileRejected("bad_stragglers_slow_worker.yaml",
                              {"stragglers.slow_worker: got 2", "a worker rank in 0..1"}));
  EXPECT_TRUE(BadFileRejected("bad_stragglers_pause_steps.yaml",
                              {"stragglers.pause_steps: got [3, 1]", "1 <= min <= max"}));
  EXPECT_TRUE(BadFileRejected("bad_stragglers_step_ms.yaml",
                              {"stragglers.step_ms: got -2", "milliseconds >= 0"}));
}

TEST(ConfigTest, DoubleOptionsKeepTheirDoublePrecision) {
  auto job = LoadJobString(
      "cluster: { servers: [\"127.0.0.1:7000\"], workers: 2 }\n"
      "tables: [ { name: u, rows: 100, dim: 4 }, { name: v, rows: 50, dim: 4 } ]\n"
      "stragglers: { slow_factor: 1.1, pause_probability: 0.1, step_ms: 0.3 }\n"
      "train: { program: matrix_factorization, user_table: u, item_table: v,\n"
      "         observe_probability: 0.2, test_fraction: 0.3 }\n",
      "mem");
  ASSERT_OK(job);
  EXPECT_EQ(job->stragglers.slow_factor, 1.1);
  EXPECT_EQ(job->stragglers.pause_probability, 0.1);
  EXPECT_EQ(job->stragglers.step_ms, 0.3);
  auto tiny = LoadJobString(JobYaml("[\"127.0.0.1:7000\"]", "stragglers: { slow_factor: 1e-300 }\n"),
                            "mem");
  EXPECT_TRUE(InvalidWith(tiny.status(), {"stragglers.slow_factor: got 1e-300", ">= 1"}));
}

TEST(ConfigTest, WorkerDeviceLoadsAndUnknownDevicesAreRejected) {
  auto job = LoadJobString(
      "cluster: { servers: [\"127.0.0.1:7000\"], workers: 1 }\n"
      "tables: [ { name: w, rows: 4 } ]\n"
      "worker: { device: cuda, cpu_threads: 3 }\n",
      "mem");
  ASSERT_OK(job);
  EXPECT_EQ(job->worker.device, DeviceKind::kCuda);
  EXPECT_EQ(job->worker.cpu_threads, 3u);
  EXPECT_TRUE(BadFileRejected("bad_worker_device.yaml",
                              {"worker.device: got \"gpu\"", "auto", "cpu", "cuda"}));
  EXPECT_TRUE(BadFileRejected("bad_worker_cpu_threads.yaml",
                              {"worker.cpu_threads: got 5000", "0 (auto)..1024"}));
}

TEST(ConfigTest, OptimizersAndSchedulesLoad) {
  auto job = LoadJobString(
      "cluster: { servers: [\"127.0.0.1:7000\"], workers: 1 }\n"
      "tables:\n"
      "  - { name: a, rows: 4, optimizer: { type: sgd, lr: 0.1, momentum: 0.9 } }\n"
      "  - { name: b, rows: 4, optimizer: { type: adagrad, lr: 0.5, epsilon: 0.001 } }\n"
      "  - { name: c, rows: 4, optimizer: { type: adam, lr: 0.001, beta1: 0.8, beta2: 0.99,\n"
      "                                       warmup_clocks: 10, decay: cosine, decay_clocks: 1000 } }\n"
      "  - { name: d, rows: 4, optimizer: { type: sgd, lr: 1, decay: step, decay_every: 5,\n"
      "                                       decay_gamma: 0.5 } }\n",
      "mem");
  ASSERT_OK(job);
  EXPECT_FLOAT_EQ(job->tables[0].optimizer.momentum, 0.9f);
  EXPECT_EQ(job->tables[1].optimizer.kind, OptimizerKind::kAdagrad);
  EXPECT_FLOAT_EQ(job->tables[1].optimizer.epsilon, 0.001f);
  EXPECT_EQ(job->tables[2].optimizer.kind, OptimizerKind::kAdam);
  EXPECT_FLOAT_EQ(job->tables[2].optimizer.beta2, 0.99f);
  EXPECT_EQ(job->tables[2].optimizer.decay, LrDecay::kCosine);
  EXPECT_EQ(job->tables[2].optimizer.decay_clocks, 1000u);
  EXPECT_EQ(job->tables[3].optimizer.decay_every, 5u);
  EXPECT_TRUE(BadFileRejected("bad_optimizer_key_for_type.yaml",
                              {"tables[0].optimizer.momentum", "not used by optimizer type adam"}));
  EXPECT_TRUE(BadFileRejected("bad_optimizer_momentum.yaml",
                              {"tables[0].optimizer.momentum: got 1.5", "[0, 1)"}));
}

TEST(ConfigTest, FtrlLoadsWithItsOwnKeys) {
  auto job = LoadJobString(
      JobYamlWithTable("name: w, rows: 4, optimizer: { type: ftrl, alpha: 0.05, beta: 0.5, "
                       "l1: 1, l2: 0.25 }"),
      "mem");
  ASSERT_OK(job);
  const OptimizerOptions& o = job->tables[0].optimizer;
  EXPECT_EQ(o.kind, OptimizerKind::kFtrl);
  EXPECT_FLOAT_EQ(o.alpha, 0.05f);
  EXPECT_FLOAT_EQ(o.beta, 0.5f);
  EXPECT_FLOAT_EQ(o.l1, 1.0f);
  EXPECT_FLOAT_EQ(o.l2, 0.25f);
  EXPECT_EQ(o.Slots(), 2u);
  // Defaults: alpha 0.1, beta 1.
  job = LoadJobString(JobYamlWithTable("name: w, rows: 4, optimizer: { type: ftrl }"), "mem");
  ASSERT_OK(job);
  EXPECT_FLOAT_EQ(job->tables[0].optimizer.alpha, 0.1f);
  EXPECT_FLOAT_EQ(job->tables[0].optimizer.beta, 1.0f);
  // No learning rate or schedule: alpha and beta set the rates.
  job = LoadJobString(JobYamlWithTable("name: w, rows: 4, optimizer: { type: ftrl, lr: 0.1 }"),
                      "mem");
  EXPECT_TRUE(InvalidWith(job.status(),
                          {"tables[0].optimizer.lr", "not used by optimizer type ftrl", "alpha"}));
  job = LoadJobString(JobYamlWithTable("name: w, rows: 4, optimizer: { type: sgd, alpha: 0.1 }"),
                      "mem");
  EXPECT_TRUE(InvalidWith(job.status(),
                          {"tables[0].optimizer.alpha", "not used by optimizer type sgd"}));
  job = LoadJobString(JobYamlWithTable("name: w, rows: 4, optimizer: { type: ftrl, alpha: 0 }"),
                      "mem");
  EXPECT_TRUE(InvalidWith(job.status(), {"tables[0].optimizer.alpha: got 0", "> 0", "line 3"}));
  job = LoadJobString(JobYamlWithTable("name: w, rows: 4, optimizer: { type: ftrl, beta: -1 }"),
                      "mem");
  EXPECT_TRUE(InvalidWith(job.status(), {"tables[0].optimizer.beta: got -1", ">= 0"}));
  job = LoadJobString(JobYamlWithTable("name: w, rows: 4, optimizer: { type: ftrl, l1: .nan }"),
                      "mem");
  EXPECT_TRUE(InvalidWith(job.status(), {"tables[0].optimizer.l1", "L1 weight"}));
}

TEST(ConfigTest, AParameterOfAnotherRuleIsRefusedWhenBuiltByHand) {
  // The loader refuses such keys; options built in code are checked alike,
  // so that no setting is silently ignored.
  JobOptions job = *LoadJobString(JobYamlWithTable("name: w, rows: 4"), "mem");
  job.tables[0].optimizer.kind = OptimizerKind::kAdam;
  job.tables[0].optimizer.l1 = 0.5f;
  EXPECT_TRUE(InvalidWith(job.Validate(),
                          {"tables[0].optimizer.l1", "on type adam", "sgd, adagrad, ftrl"}));
  job.tables[0].optimizer.kind = OptimizerKind::kAdd;
  job.tables[0].optimizer.l1 = 0.0f;
  job.tables[0].optimizer.l2 = 0.5f;
  EXPECT_TRUE(InvalidWith(job.Validate(), {"tables[0].optimizer.l2", "on type add"}));
  job.tables[0].optimizer.l2 = 0.0f;
  EXPECT_OK(job.Validate());
}

TEST(ConfigTest, ZeroRequestTimeoutIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_zero_timeout.yaml",
                              {"client.request_timeout_ms: got 0"}));
}

TEST(ConfigTest, RegularizationIsCheckedPerOptimizer) {
  EXPECT_TRUE(BadFileRejected("bad_optimizer_l1_with_adam.yaml",
                              {"tables[0].optimizer.l1", "not used by optimizer type adam", "l2"}));
  EXPECT_TRUE(BadFileRejected("bad_optimizer_negative_l2.yaml",
                              {"tables[0].optimizer.l2", "-0.5", ">= 0"}));
}

TEST(ConfigTest, CheckpointNeedsADirAndAPeriod) {
  EXPECT_TRUE(BadFileRejected("bad_checkpoint_zero_every.yaml",
                              {"checkpoint.every_clocks", "got 0", ">= 1"}));
  EXPECT_TRUE(BadFileRejected("bad_checkpoint_missing_dir.yaml",
                              {"checkpoint", "dir", "the folder of the checkpoints"}));
}

TEST(ConfigTest, CheckpointFullEveryLoadsAndIsBounded) {
  const std::string dir = UniqueTempDir("full_every");
  const auto load = [&](const std::string& full_every) {
    const std::string path = dir + "/job.yaml";
    std::ofstream(path) << "cluster: { servers: [\"127.0.0.1:7000\"], workers: 1 }\n"
                           "tables: [ { name: w, rows: 10 } ]\n"
                           "checkpoint: { dir: ckpt, full_every: " + full_every + " }\n";
    return LoadJobFile(path);
  };
  StatusOr<JobOptions> job = load("10");
  ASSERT_OK(job);
  EXPECT_EQ(job->checkpoint.full_every, 10u);
  EXPECT_EQ(JobOptions().checkpoint.full_every, 1u);  // every generation full
  EXPECT_TRUE(InvalidWith(load("0").status(), {"checkpoint.full_every", "got 0", "1 (every one full) to 1000"}));
  EXPECT_TRUE(InvalidWith(load("1001").status(), {"checkpoint.full_every", "got 1001"}));
  std::filesystem::remove_all(dir);
}

TEST(ConfigTest, RegularizationAndCheckpointKeysLoad) {
  const std::string dir = UniqueTempDir("train_keys");
  const std::string path = dir + "/job.yaml";
  {
    std::ofstream out(path);
    out << "cluster: { servers: [\"127.0.0.1:7000\"], workers: 2 }\n"
           "tables:\n"
           "  - { name: u, rows: 100, dim: 4, optimizer: { type: adagrad, lr: 0.1, l1: 0.01, l2: 0.001 } }\n"
           "  - { name: v, rows: 50, dim: 4 }\n"
           "train: { program: matrix_factorization, user_table: u, item_table: v,\n"
           "         observe_probability: 0.2, test_fraction: 0.25, metrics_csv: run.csv }\n"
           "checkpoint: { dir: ckpt, every_clocks: 50, keep: 2, sync: false, restore: false }\n";
  }
  StatusOr<JobOptions> job = LoadJobFile(path);
  ASSERT_OK(job);
  EXPECT_FLOAT_EQ(job->tables[0].optimizer.l1, 0.01f);
  EXPECT_FLOAT_EQ(job->tables[0].optimizer.l2, 0.001f);
  EXPECT_EQ(job->checkpoint.dir, "ckpt");
  EXPECT_EQ(job->checkpoint.every_clocks, 50u);
  EXPECT_EQ(job->checkpoint.keep, 2u);
  EXPECT_FALSE(job->checkpoint.sync);
  EXPECT_FALSE(job->checkpoint.restore);
  // The fingerprint follows the model, not the addresses.
  JobOptions moved = *job;
  moved.cluster.servers = {"127.0.0.1:7999"};
  EXPECT_EQ(moved.Fingerprint(), job->Fingerprint());
  moved.tables[0].dim = 8;
  EXPECT_NE(moved.Fingerprint(), job->Fingerprint());
  std::filesystem::remove_all(dir);
}

TEST(ConfigTest, TopLevelListIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_top_level_list.yaml",
                              {"(top level): got a list", "map"}));
}

TEST(ConfigTest, EmptyFileIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_empty.yaml",
                              {"(top level): the document is empty"}));
}

TEST(ConfigTest, StrayCommaIsSyntaxErrorNotAHang) {
  // yaml-cpp 0.7's LoadAll() loops forever on these (jbeder/yaml-cpp#1040).
  for (const char* yaml : {",", ",a: 1", "[a],", "a: [1],\n"}) {
    StatusOr<JobOptions> job = LoadJobString(yaml, "mem");
    EXPECT_TRUE(InvalidWith(job.status(), {"mem: ", "YAML syntax error"}))
        << "input \"" << yaml << "\"";
  }
  EXPECT_TRUE(BadFileRejected("bad_stray_comma.yaml",
                              {"line 3, column 1", "YAML syntax error"}));
}

TEST(ConfigTest, TwoDocumentsAreRejected) {
  EXPECT_TRUE(BadFileRejected("bad_two_documents.yaml",
                              {"more than one YAML document"}));
}

}  // namespace
}  // namespace ps
