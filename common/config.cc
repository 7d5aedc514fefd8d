#include "common/config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "common/text.h"
#include "common/yaml_reader.h"
#include "common/yaml_tree.h"

namespace ps {
namespace {

constexpr std::string_view kTopLevelKeys =
    "cluster, tables, consistency, liveness, stragglers, optimizer, server, client, worker, "
    "train, checkpoint";

// Turns one YAML document into JobOptions. Knows the schema; leaves the
// value checks that need no YAML (ranges, cross-references) to Validate().
class JobParser : public YamlReader {
 public:
  explicit JobParser(const std::string& source) : YamlReader(source) {}

  Status Parse(const YamlNode& root, JobOptions* job) const {
    const YamlValue document = Root(root);
    PS_ASSIGN_OR_RETURN(
        YamlMap top,
        ReadMap(document,
                {"cluster", "tables", "consistency", "liveness", "stragglers",
                 "optimizer", "server", "client", "worker", "train", "checkpoint"},
                "a map with keys " + std::string(kTopLevelKeys)));

    PS_ASSIGN_OR_RETURN(
        const YamlValue* cluster,
        Required(top, "cluster", "a map with servers and workers"));
    PS_RETURN_IF_ERROR(ParseCluster(*cluster, &job->cluster));

    // The job-wide optimizer is the default of every table, so it comes
    // first.
    OptimizerOptions default_optimizer;
    if (const YamlValue* optimizer = top.Find("optimizer")) {
      // Validate() sees only the tables' copies of this one and would name
      // their paths, so its values are checked here, where they are written.
      PS_RETURN_IF_ERROR(ParseOptimizer(*optimizer, /*check_values=*/true,
                                        &default_optimizer));
    }

    PS_ASSIGN_OR_RETURN(const YamlValue* tables,
                        Required(top, "tables", "a list of tables"));
    PS_ASSIGN_OR_RETURN(std::vector<YamlValue> items,
                        ReadList(*tables,
                                 "a list of tables, each a map "
                                 "with name and rows"));
    job->tables.resize(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      PS_RETURN_IF_ERROR(
          ParseTable(items[i], default_optimizer, &job->tables[i]));
    }

    if (const YamlValue* consistency = top.Find("consistency")) {
      PS_RETURN_IF_ERROR(ParseConsistency(*consistency, &job->consistency));
    }
    if (const YamlValue* liveness = top.Find("liveness")) {
      PS_RETURN_IF_ERROR(ParseLiveness(*liveness, &job->liveness));
    }
    if (const YamlValue* stragglers = top.Find("stragglers")) {
      PS_RETURN_IF_ERROR(ParseStragglers(*stragglers, &job->stragglers));
    }
    if (const YamlValue* server = top.Find("server")) {
      PS_RETURN_IF_ERROR(ParseServer(*server, &job->server));
    }
    if (const YamlValue* client = top.Find("client")) {
      PS_RETURN_IF_ERROR(ParseClient(*client, &job->client));
    }
    if (const YamlValue* worker = top.Find("worker")) {
      PS_ASSIGN_OR_RETURN(YamlMap map, ReadMap(*worker, {"device", "cpu_threads"},
                                           "a map with device, cpu_threads"));
      if (const YamlValue* device = map.Find("device")) {
        PS_ASSIGN_OR_RETURN(size_t index, ReadName(*device, {"auto", "cpu", "cuda"}));
        job->worker.device = static_cast<DeviceKind>(index);
      }
      if (const YamlValue* v = map.Find("cpu_threads")) {
        PS_RETURN_IF_ERROR(ReadUnsigned(*v, &job->worker.cpu_threads));
      }
    }
    if (const YamlValue* train = top.Find("train")) {
      PS_RETURN_IF_ERROR(ParseTrain(*train, &job->train));
    }
    if (const YamlValue* checkpoint = top.Find("checkpoint")) {
      PS_RETURN_IF_ERROR(ParseCheckpoint(*checkpoint, &job->checkpoint));
    }
    return Status::Ok();
  }

  // "<source>: <path>: <problem>; expected <expected> (line L, column C)".
 private:
  Status ParseCluster(const YamlValue& value, ClusterOptions* cluster) const {
    PS_ASSIGN_OR_RETURN(YamlMap map,
                        ReadMap(value, {"servers", "workers", "allow_remote"},
                                "a map with servers and workers"));
    constexpr std::string_view kServers =
        "a list of \"host:port\" strings, one per shard";
    PS_ASSIGN_OR_RETURN(const YamlValue* servers,
                        Required(map, "servers", kServers));
    PS_ASSIGN_OR_RETURN(std::vector<YamlValue> items, ReadList(*servers, kServers));
    cluster->servers.clear();
    for (const YamlValue& item : items) {
      std::string server;
      PS_RETURN_IF_ERROR(ReadString(item, "a \"host:port\" string", &server));
      cluster->servers.push_back(std::move(server));
    }
    PS_ASSIGN_OR_RETURN(
        const YamlValue* workers,
        Required(map, "workers", "the number of worker processes, >= 1"));
    PS_RETURN_IF_ERROR(ReadUnsigned(*workers, &cluster->workers));
    if (const YamlValue* allow_remote = map.Find("allow_remote")) {
      PS_RETURN_IF_ERROR(ReadBool(*allow_remote, &cluster->allow_remote));
    }
    return Status::Ok();
  }

  Status ParseInit(const YamlValue& value, InitOptions* init) const {
    PS_ASSIGN_OR_RETURN(
        YamlMap map, ReadMap(value, {"type", "value", "scale", "stddev", "seed"},
                         "a map with type (zeros, constant, uniform, normal) "
                         "and its parameters"));
    *init = InitOptions();
    std::string_view type = "zeros";
    if (const YamlValue* type_value = map.Find("type")) {
      PS_ASSIGN_OR_RETURN(
          size_t index,
          ReadName(*type_value, {"zeros", "constant", "uniform", "normal"}));
      constexpr InitKind kKinds[] = {InitKind::kZeros, InitKind::kConstant,
                                     InitKind::kUniform, InitKind::kNormal};
      constexpr std::string_view kNames[] = {"zeros", "constant", "uniform",
                                             "normal"};
      init->kind = kKinds[index];
      type = kNames[index];
    }
    switch (init->kind) {
      case InitKind::kZeros:
        PS_RETURN_IF_ERROR(CheckKeysForType(map, "init", type, {"type"}));
        break;
      case InitKind::kConstant:
        PS_RETURN_IF_ERROR(
            CheckKeysForType(map, "init", type, {"type", "value"}));
        break;
      case InitKind::kUniform:
        PS_RETURN_IF_ERROR(
            CheckKeysForType(map, "init", type, {"type", "scale", "seed"}));
        break;
      case InitKind::kNormal:
        PS_RETURN_IF_ERROR(
            CheckKeysForType(map, "init", type, {"type", "stddev", "seed"}));
        break;
    }
    // At most one of value / scale / stddev is present after the check.
    for (std::string_view key : {"value", "scale", "stddev"}) {
      if (const YamlValue* parameter = map.Find(key)) {
        PS_RETURN_IF_ERROR(ReadFloat(*parameter, &init->value));
      }
    }
    if (const YamlValue* seed = map.Find("seed")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*seed, &init->seed));
    }
    return Status::Ok();
  }

  // With `check_values`, also rejects what Validate() would reject.
  Status ParseOptimizer(const YamlValue& value, bool check_values,
                        OptimizerOptions* optimizer) const {
    const std::string_view kSchedule[] = {"warmup_clocks", "decay", "decay_every", "decay_gamma",
                                          "decay_clocks"};
    PS_ASSIGN_OR_RETURN(
        YamlMap map, ReadMap(value,
                         {"type", "lr", "momentum", "beta1", "beta2", "epsilon", "warmup_clocks",
                          "decay", "decay_every", "decay_gamma", "decay_clocks", "l1", "l2"},
                         "a map with type (sgd, add, adagrad, adam) and its parameters"));
    *optimizer = OptimizerOptions();
    std::string_view type = "sgd";
    if (const YamlValue* type_value = map.Find("type")) {
      PS_ASSIGN_OR_RETURN(size_t index,
                          ReadName(*type_value, {"sgd", "add", "adagrad", "adam"}));
      const OptimizerKind kinds[] = {OptimizerKind::kSgd, OptimizerKind::kAdd,
                                     OptimizerKind::kAdagrad, OptimizerKind::kAdam};
      const std::string_view names[] = {"sgd", "add", "adagrad", "adam"};
      optimizer->kind = kinds[index];
      type = names[index];
    }
    std::vector<std::string_view> allowed = {"type"};
    if (optimizer->kind != OptimizerKind::kAdd) {
      allowed.push_back("lr");
      allowed.insert(allowed.end(), std::begin(kSchedule), std::end(kSchedule));
    }
    if (optimizer->kind == OptimizerKind::kSgd) allowed.push_back("momentum");
    if (optimizer->kind == OptimizerKind::kAdagrad || optimizer->kind == OptimizerKind::kAdam) {
      allowed.push_back("epsilon");
    }
    if (optimizer->kind != OptimizerKind::kAdd) allowed.push_back("l2");
    if (optimizer->kind == OptimizerKind::kSgd || optimizer->kind == OptimizerKind::kAdagrad) {
      allowed.push_back("l1");
    }
    if (optimizer->kind == OptimizerKind::kAdam) {
      allowed.push_back("beta1");
      allowed.push_back("beta2");
    }
    for (const auto& [key, entry] : map.entries()) {
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        std::string keys;
        for (std::string_view k : allowed) keys.append(keys.empty() ? "" : ", ").append(k);
        return Error(entry, "not used by optimizer type " + std::string(type), "only the keys " + keys);
      }
    }
    if (const YamlValue* lr = map.Find("lr")) {
      PS_RETURN_IF_ERROR(ReadFloat(*lr, &optimizer->lr));
      if (check_values &&
          !(std::isfinite(optimizer->lr) && optimizer->lr > 0)) {
        return Error(*lr, "got " + FloatText(optimizer->lr),
                     "a finite learning rate > 0");
      }
    }
    if (const YamlValue* v = map.Find("momentum")) PS_RETURN_IF_ERROR(ReadFloat(*v, &optimizer->momentum));
    if (const YamlValue* v = map.Find("beta1")) PS_RETURN_IF_ERROR(ReadFloat(*v, &optimizer->beta1));
    if (const YamlValue* v = map.Find("beta2")) PS_RETURN_IF_ERROR(ReadFloat(*v, &optimizer->beta2));
    if (const YamlValue* v = map.Find("epsilon")) PS_RETURN_IF_ERROR(ReadFloat(*v, &optimizer->epsilon));
    if (const YamlValue* v = map.Find("warmup_clocks")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &optimizer->warmup_clocks));
    }
    if (const YamlValue* v = map.Find("decay")) {
      PS_ASSIGN_OR_RETURN(size_t index, ReadName(*v, {"none", "step", "cosine"}));
      optimizer->decay = static_cast<LrDecay>(index);
    }
    if (const YamlValue* v = map.Find("decay_every")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &optimizer->decay_every));
    }
    if (const YamlValue* v = map.Find("decay_gamma")) {
      PS_RETURN_IF_ERROR(ReadFloat(*v, &optimizer->decay_gamma));
    }
    if (const YamlValue* v = map.Find("decay_clocks")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &optimizer->decay_clocks));
    }
    if (const YamlValue* v = map.Find("l1")) PS_RETURN_IF_ERROR(ReadFloat(*v, &optimizer->l1));
    if (const YamlValue* v = map.Find("l2")) PS_RETURN_IF_ERROR(ReadFloat(*v, &optimizer->l2));
    return Status::Ok();
  }

  Status ParseTable(const YamlValue& value,
                    const OptimizerOptions& default_optimizer,
                    TableOptions* table) const {
    PS_ASSIGN_OR_RETURN(
        YamlMap map, ReadMap(value, {"name", "rows", "dim", "init", "optimizer"},
                         "a table: a map with name and rows"));
    PS_ASSIGN_OR_RETURN(const YamlValue* name,
                        Required(map, "name", "the table's name"));
    PS_RETURN_IF_ERROR(ReadString(*name, "a table name", &table->name));
    PS_ASSIGN_OR_RETURN(
        const YamlValue* rows,
        Required(map, "rows", "the table's number of rows, >= 1"));
    PS_RETURN_IF_ERROR(ReadUnsigned(*rows, &table->rows));
    if (const YamlValue* dim = map.Find("dim")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*dim, &table->dim));
    }
    if (const YamlValue* init = map.Find("init")) {
      PS_RETURN_IF_ERROR(ParseInit(*init, &table->init));
    }
    // A table's own optimizer replaces the job-wide one as a whole.
    table->optimizer = default_optimizer;
    if (const YamlValue* optimizer = map.Find("optimizer")) {
      PS_RETURN_IF_ERROR(ParseOptimizer(*optimizer, /*check_values=*/false,
                                        &table->optimizer));
    }
    return Status::Ok();
  }

  Status ParseConsistency(const YamlValue& value, ConsistencyOptions* c) const {
    PS_ASSIGN_OR_RETURN(YamlMap map, ReadMap(value, {"mode", "staleness", "aggregate"},
                                         "a map with mode (bsp, ssp, asp) and, for ssp, "
                                         "staleness"));
    PS_ASSIGN_OR_RETURN(const YamlValue* mode,
                        Required(map, "mode", "one of \"bsp\", \"ssp\", \"asp\""));
    PS_ASSIGN_OR_RETURN(size_t index, ReadName(*mode, {"bsp", "ssp", "asp"}));
    c->mode = static_cast<ConsistencyMode>(index);
    if (const YamlValue* aggregate = map.Find("aggregate")) {
      PS_RETURN_IF_ERROR(ReadBool(*aggregate, &c->aggregate));
    }
    const YamlValue* staleness = map.Find("staleness");
    if (c->mode == ConsistencyMode::kSsp) {
      constexpr std::string_view kExpected =
          "a staleness >= 1 for mode ssp: how many clocks a worker may run ahead of the "
          "slowest";
      PS_ASSIGN_OR_RETURN(staleness, Required(map, "staleness", kExpected));
      PS_RETURN_IF_ERROR(ReadUnsigned(*staleness, &c->staleness));
      if (c->staleness < 1) return Error(*staleness, "got 0", kExpected);
    } else if (staleness != nullptr) {
      return Error(*staleness, "not used by mode " + std::string(index == 0 ? "bsp" : "asp"),
                   "staleness only with mode ssp (bsp is staleness 0, asp is unbounded)");
    }
    return Status::Ok();
  }

  Status ParseLiveness(const YamlValue& value, LivenessOptions* l) const {
    PS_ASSIGN_OR_RETURN(
        YamlMap map, ReadMap(value,
                         {"heartbeat_ms", "timeout_ms", "on_dead_worker", "server_restarts",
                          "server_down_timeout_ms"},
                         "a map with heartbeat_ms, timeout_ms, on_dead_worker, server_restarts, "
                         "server_down_timeout_ms"));
    if (const YamlValue* v = map.Find("server_restarts")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &l->server_restarts));
    }
    if (const YamlValue* v = map.Find("server_down_timeout_ms")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &l->server_down_timeout_ms));
    }
    if (const YamlValue* v = map.Find("heartbeat_ms")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &l->heartbeat_ms));
    }
    if (const YamlValue* v = map.Find("timeout_ms")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &l->timeout_ms));
    }
    if (const YamlValue* v = map.Find("on_dead_worker")) {
      PS_ASSIGN_OR_RETURN(size_t index, ReadName(*v, {"fail", "drop"}));
      l->on_dead_worker = static_cast<DeadWorkerPolicy>(index);
    }
    return Status::Ok();
  }

  Status ParseStragglers(const YamlValue& value, StragglerOptions* st) const {
    PS_ASSIGN_OR_RETURN(
        YamlMap map, ReadMap(value,
                         {"slow_worker", "slow_factor", "pause_probability", "pause_steps", "seed",
                          "step_ms"},
                         "a map with slow_worker, slow_factor, pause_probability, pause_steps, "
                         "seed, step_ms"));
    if (const YamlValue* v = map.Find("slow_worker")) {
      uint32_t rank = 0;
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &rank));
      st->slow_worker = rank;
    }
    if (const YamlValue* v = map.Find("slow_factor")) {
      float f = 0;
      PS_RETURN_IF_ERROR(ReadFloat(*v, &f));
      st->slow_factor = f;
    }
    if (const YamlValue* v = map.Find("pause_probability")) {
      float p = 0;
      PS_RETURN_IF_ERROR(ReadFloat(*v, &p));
      st->pause_probability = p;
    }
    if (const YamlValue* v = map.Find("pause_steps")) {
      PS_ASSIGN_OR_RETURN(std::vector<YamlValue> items,
                          ReadList(*v, "a list [min, max] of whole steps"));
      if (items.size() != 2) {
        return Error(*v, "got " + std::to_string(items.size()) + " items",
                     "a list [min, max] of whole steps");
      }
      PS_RETURN_IF_ERROR(ReadUnsigned(items[0], &st->pause_min_steps));
      PS_RETURN_IF_ERROR(ReadUnsigned(items[1], &st->pause_max_steps));
    }
    if (const YamlValue* v = map.Find("seed")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &st->seed));
    }
    if (const YamlValue* v = map.Find("step_ms")) {
      float ms = 0;
      PS_RETURN_IF_ERROR(ReadFloat(*v, &ms));
      st->step_ms = ms;
    }
    return Status::Ok();
  }

  Status ParseCheckpoint(const YamlValue& value, CheckpointOptions* checkpoint) const {
    PS_ASSIGN_OR_RETURN(YamlMap map, ReadMap(value, {"dir", "every_clocks", "keep", "sync", "restore"},
                                         "a map with dir and, optionally, every_clocks, keep, "
                                         "sync, restore"));
    PS_ASSIGN_OR_RETURN(const YamlValue* dir,
                        Required(map, "dir", "the folder of the checkpoints"));
    PS_RETURN_IF_ERROR(ReadString(*dir, "a folder", &checkpoint->dir));
    if (checkpoint->dir.empty()) return Error(*dir, "an empty path", "a folder");
    if (const YamlValue* v = map.Find("every_clocks")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &checkpoint->every_clocks));
    }
    if (const YamlValue* v = map.Find("keep")) PS_RETURN_IF_ERROR(ReadUnsigned(*v, &checkpoint->keep));
    if (const YamlValue* v = map.Find("sync")) PS_RETURN_IF_ERROR(ReadBool(*v, &checkpoint->sync));
    if (const YamlValue* v = map.Find("restore")) {
      PS_RETURN_IF_ERROR(ReadBool(*v, &checkpoint->restore));
    }
    return Status::Ok();
  }

  Status ParseServer(const YamlValue& value, ServerOptions* server) const {
    PS_ASSIGN_OR_RETURN(YamlMap map, ReadMap(value,
                                         {"max_request_bytes",
                                          "max_keys_per_request", "io_threads",
                                          "reject_non_finite"},
                                         "a map of server limits"));
    if (const YamlValue* v = map.Find("max_request_bytes")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &server->max_request_bytes));
    }
    if (const YamlValue* v = map.Find("max_keys_per_request")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &server->max_keys_per_request));
    }
    if (const YamlValue* v = map.Find("io_threads")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &server->io_threads));
    }
    if (const YamlValue* v = map.Find("reject_non_finite")) {
      PS_RETURN_IF_ERROR(ReadBool(*v, &server->reject_non_finite));
    }
    return Status::Ok();
  }

  Status ParseClient(const YamlValue& value, ClientOptions* client) const {
    PS_ASSIGN_OR_RETURN(
        YamlMap map,
        ReadMap(value, {"request_timeout_ms", "max_in_flight", "io_threads", "push_part_bytes",
                        "cache"},
                "a map of client settings"));
    if (const YamlValue* v = map.Find("request_timeout_ms")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &client->request_timeout_ms));
    }
    if (const YamlValue* v = map.Find("max_in_flight")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &client->max_in_flight));
    }
    if (const YamlValue* v = map.Find("push_part_bytes")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &client->push_part_bytes));
    }
    if (const YamlValue* v = map.Find("cache")) {
      PS_RETURN_IF_ERROR(ReadBool(*v, &client->cache));
    }
    if (const YamlValue* v = map.Find("io_threads")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &client->io_threads));
    }
    return Status::Ok();
  }

  Status ParseTrain(const YamlValue& value, TrainOptions* train) const {
    PS_ASSIGN_OR_RETURN(
        YamlMap map,
        ReadMap(value,
                {"program", "table", "user_table", "item_table", "features", "layers",
                 "eval_every", "data_dir", "samples_per_worker", "test_samples",
                 "observe_probability", "test_fraction", "batch_size", "iterations", "noise",
                 "seed", "log_every", "metrics_csv"},
                "a map with the training program's settings"));
    // A train section is what makes a job a training job.
    train->program = TrainProgram::kLinearRegression;
    if (const YamlValue* v = map.Find("program")) {
      PS_ASSIGN_OR_RETURN(size_t index,
                          ReadName(*v, {"linear_regression", "mlp", "sparse_logistic_regression",
                                        "matrix_factorization"}));
      const TrainProgram programs[] = {TrainProgram::kLinearRegression, TrainProgram::kMlp,
                                       TrainProgram::kSparseLogisticRegression,
                                       TrainProgram::kMatrixFactorization};
      train->program = programs[index];
    }
    if (const YamlValue* v = map.Find("table")) {
      PS_RETURN_IF_ERROR(ReadString(*v, "a table name", &train->table));
    }
    if (const YamlValue* v = map.Find("user_table")) {
      PS_RETURN_IF_ERROR(ReadString(*v, "a table name", &train->user_table));
    }
    if (const YamlValue* v = map.Find("item_table")) {
      PS_RETURN_IF_ERROR(ReadString(*v, "a table name", &train->item_table));
    }
    if (train->program == TrainProgram::kSparseLogisticRegression ||
        train->program == TrainProgram::kMatrixFactorization) {
      if (const YamlValue* v = map.Find("features")) {
        PS_RETURN_IF_ERROR(ReadUnsigned(*v, &train->features));
      }
    } else if (train->program == TrainProgram::kLinearRegression) {
      constexpr std::string_view kFeatures =
          "the number of features, >= 1 and equal to the rows of train.table "
          "(omit the train section for a job without training)";
      PS_ASSIGN_OR_RETURN(const YamlValue* features, Required(map, "features", kFeatures));
      PS_RETURN_IF_ERROR(ReadUnsigned(*features, &train->features));
      if (train->features == 0) return Error(*features, "got 0", kFeatures);
    } else {
      constexpr std::string_view kLayers = "a list of layer sizes, e.g. [784, 100, 10]";
      PS_ASSIGN_OR_RETURN(const YamlValue* layers, Required(map, "layers", kLayers));
      PS_ASSIGN_OR_RETURN(std::vector<YamlValue> items, ReadList(*layers, kLayers));
      train->layers.resize(items.size());
      for (size_t i = 0; i < items.size(); ++i) {
        PS_RETURN_IF_ERROR(ReadUnsigned(items[i], &train->layers[i]));
      }
    }
    if (const YamlValue* v = map.Find("eval_every")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &train->eval_every));
    }
    if (const YamlValue* v = map.Find("data_dir")) {
      PS_RETURN_IF_ERROR(ReadString(*v, "a folder", &train->data_dir));
    }
    if (const YamlValue* v = map.Find("samples_per_worker")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &train->samples_per_worker));
    }
    if (const YamlValue* v = map.Find("test_samples")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &train->test_samples));
    }
    if (const YamlValue* v = map.Find("observe_probability")) {
      float p = 0;
      PS_RETURN_IF_ERROR(ReadFloat(*v, &p));
      train->observe_probability = p;
    }
    if (const YamlValue* v = map.Find("test_fraction")) {
      float f = 0;
      PS_RETURN_IF_ERROR(ReadFloat(*v, &f));
      train->test_fraction = f;
    }
    if (const YamlValue* v = map.Find("metrics_csv")) {
      PS_RETURN_IF_ERROR(ReadString(*v, "a file path", &train->metrics_csv));
    }
    if (const YamlValue* v = map.Find("batch_size")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &train->batch_size));
    }
    if (const YamlValue* v = map.Find("iterations")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &train->iterations));
    }
    if (const YamlValue* v = map.Find("noise")) {
      PS_RETURN_IF_ERROR(ReadFloat(*v, &train->noise));
    }
    if (const YamlValue* v = map.Find("seed")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &train->seed));
    }
    if (const YamlValue* v = map.Find("log_every")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &train->log_every));
    }
    return Status::Ok();
  }

};

// Parses `text` into *job.
Status ParseJob(const std::string& text, const std::string& source, JobOptions* job) {
  PS_ASSIGN_OR_RETURN(YamlDocument document, ReadYamlDocument(text, source));
  JobParser parser(source);
  if (document.documents() != 1) {
    return parser.Error("", YamlMark(),
                        document.documents() == 0 ? "the document is empty"
                                                  : "found more than one YAML document",
                        "one YAML document, a map with keys " + std::string(kTopLevelKeys));
  }
  return parser.Parse(document.root(), job);
}

}  // namespace

StatusOr<JobOptions> LoadJobString(const std::string& yaml_text,
                                   const std::string& source) {
  JobOptions job;
  PS_RETURN_IF_ERROR(ParseJob(yaml_text, source, &job));
  job.source = source;
  PS_RETURN_IF_ERROR(job.Validate());
  return job;
}

StatusOr<JobOptions> LoadJobFile(const std::string& path) {
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (status.type() == std::filesystem::file_type::not_found) {
    return NotFoundError(path +
                         ": no such file; expected the path of a job YAML "
                         "file (see config/ for examples)");
  }
  if (ec) {
    return Status(ec == std::errc::permission_denied
                      ? StatusCode::kPermissionDenied
                      : StatusCode::kInternal,
                  path + ": cannot access: " + ec.message());
  }
  if (status.type() == std::filesystem::file_type::directory) {
    return InvalidArgumentError(
        path + ": is a directory; expected the path of a job YAML file");
  }

  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    return Status(
        error == EACCES ? StatusCode::kPermissionDenied : StatusCode::kInternal,
        path + ": cannot open: " + std::strerror(error));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return InternalError(path + ": read failed: " + std::strerror(errno));
  }
  return LoadJobString(text.str(), path);
}

}  // namespace ps
