#include "common/config.h"

#include <algorithm>
#include <cerrno>
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
#include "common/update_rule.h"
#include "common/yaml_reader.h"
#include "common/yaml_tree.h"

namespace ps {
namespace {

// The top-level keys, in the order messages list them: common's own and
// those of kJobSectionsOfOtherLayers.
const std::vector<std::string_view> kTopLevelKeys = {
    "cluster", "tables",  "consistency", "liveness", "rendezvous", "stragglers",
    "optimizer", "server", "client",     "worker",   "train",      "checkpoint", "security",
    "replication", "metrics"};

// A list of "host:port" strings (`expected` describes the list).
Status ReadHostPorts(const YamlReader& r, const YamlValue& value, std::string_view expected,
                     std::vector<std::string>* out) {
  PS_ASSIGN_OR_RETURN(std::vector<YamlValue> items, r.ReadList(value, expected));
  for (const YamlValue& item : items) {
    std::string endpoint;
    PS_RETURN_IF_ERROR(r.ReadString(item, "a \"host:port\" string", &endpoint));
    out->push_back(std::move(endpoint));
  }
  return Status::Ok();
}

Status ParseServers(const YamlReader& r, const YamlValue& value, ClusterOptions* cluster) {
  return ReadHostPorts(r, value, "a list of \"host:port\" strings, one per shard",
                       &cluster->servers);
}

Status ParseCluster(const YamlReader& r, const YamlValue& value, ClusterOptions* cluster) {
  const std::vector<YamlField<ClusterOptions>> fields = {
      {"servers", ParseServers, "a list of \"host:port\" strings, one per shard"},
      UnsignedField("workers", &ClusterOptions::workers, "the number of worker processes, >= 1"),
      BoolField("allow_remote", &ClusterOptions::allow_remote),
      EnumField("bind", &ClusterOptions::bind, kBindModeNames),
      BoolField("evaluator", &ClusterOptions::evaluator),
  };
  return ReadSection(r, value, fields, "a map with servers and workers", cluster);
}

Status ParseInit(const YamlReader& r, const YamlValue& value, InitOptions* init) {
  PS_ASSIGN_OR_RETURN(YamlMap map, r.ReadMap(value, {"type", "value", "scale", "stddev", "seed"},
                                             "a map with type (zeros, constant, uniform, "
                                             "normal) and its parameters"));
  *init = InitOptions();
  if (const YamlValue* type = map.Find("type")) {
    PS_RETURN_IF_ERROR(r.ReadEnum(*type, kInitKindNames, &init->kind));
  }
  std::vector<std::string_view> allowed = {"type"};
  switch (init->kind) {
    case InitKind::kZeros:
      break;
    case InitKind::kConstant:
      allowed.push_back("value");
      break;
    case InitKind::kUniform:
      allowed.insert(allowed.end(), {"scale", "seed"});
      break;
    case InitKind::kNormal:
      allowed.insert(allowed.end(), {"stddev", "seed"});
      break;
  }
  PS_RETURN_IF_ERROR(
      r.CheckKeysForType(map, "init", NameOf(kInitKindNames, init->kind), allowed));
  // At most one of value / scale / stddev is present after the check.
  for (std::string_view key : {"value", "scale", "stddev"}) {
    if (const YamlValue* parameter = map.Find(key)) {
      PS_RETURN_IF_ERROR(r.ReadFloat(*parameter, &init->value));
    }
  }
  if (const YamlValue* seed = map.Find("seed")) PS_RETURN_IF_ERROR(r.ReadUnsigned(*seed, &init->seed));
  return Status::Ok();
}

// The keys of the learning rate and its schedule, taken by the rules that
// have one (UpdateRule::scheduled).
std::vector<YamlField<OptimizerOptions>> ScheduleFields() {
  using O = OptimizerOptions;
  return {
      FloatField("lr", &O::lr),
      UnsignedField("warmup_clocks", &O::warmup_clocks),
      EnumField("decay", &O::decay, kLrDecayNames),
      UnsignedField("decay_every", &O::decay_every),
      FloatField("decay_gamma", &O::decay_gamma),
      UnsignedField("decay_clocks", &O::decay_clocks),
  };
}

// The optimizer section: its type first, which decides the other keys
// (the registry's entry of that rule, common/update_rule.h).
Status ParseOptimizer(const YamlReader& r, const YamlValue& value, OptimizerOptions* optimizer) {
  using O = OptimizerOptions;
  // The schedule's fields, then every rule's parameters (each key once).
  std::vector<YamlField<O>> fields = ScheduleFields();
  const size_t schedule_fields = fields.size();
  std::vector<std::string_view> keys = {"type"};
  for (const YamlField<O>& field : fields) keys.push_back(field.key);
  for (const UpdateRule* rule : UpdateRules()) {
    for (const OptimizerParameter& p : rule->parameters) {
      if (std::find(keys.begin(), keys.end(), p.key) != keys.end()) continue;
      keys.push_back(p.key);
      fields.push_back(FloatField(p.key, p.field));
    }
  }
  const std::vector<std::string_view> names = OptimizerNames();
  PS_ASSIGN_OR_RETURN(
      YamlMap map, r.ReadMap(value, keys,
                             "a map with type (" + JoinNames(names) + ") and its parameters"));
  *optimizer = OptimizerOptions();
  const UpdateRule* rule = FindRule(optimizer->kind);
  if (const YamlValue* type = map.Find("type")) {
    PS_ASSIGN_OR_RETURN(size_t index, r.ReadName(*type, names));
    rule = UpdateRules()[index];
    optimizer->kind = rule->kind;
  }
  std::vector<std::string_view> allowed = {"type"};
  if (rule->scheduled) {
    for (size_t i = 0; i < schedule_fields; ++i) allowed.push_back(fields[i].key);
  }
  for (const OptimizerParameter& p : rule->parameters) allowed.push_back(p.key);
  PS_RETURN_IF_ERROR(r.CheckKeysForType(map, "optimizer", rule->name, allowed));
  for (const YamlField<O>& field : fields) {
    const YamlValue* entry = map.Find(field.key);
    if (entry == nullptr) continue;
    PS_RETURN_IF_ERROR(field.read(r, *entry, optimizer));
  }
  return Status::Ok();
}

Status ParseTable(const YamlReader& r, const YamlValue& value,
                  const OptimizerOptions& default_optimizer, TableOptions* table) {
  using T = TableOptions;
  const std::vector<YamlField<T>> fields = {
      {"name",
       [](const YamlReader& reader, const YamlValue& v, T* t) {
         return reader.ReadString(v, "a table name", &t->name);
       },
       "the table's name"},
      EnumField("keys", &T::keys, kKeyKindNames),
      {.key = "rows",
       .read = nullptr,
       // Required of a range table (`keys` is read before it).
       .read_any = [](const YamlReader& reader, const YamlMap& map, const YamlValue* v, T* t) -> Status {
         if (v == nullptr && t->keys == KeyKind::kRange) {
           PS_ASSIGN_OR_RETURN(
               v, reader.Required(map, "rows",
                                  "the table's number of rows, >= 1 (or keys: hashed, for "
                                  "rows keyed by any id)"));
         }
         return v == nullptr ? Status::Ok() : reader.ReadUnsigned(*v, &t->rows);
       }},
      UnsignedField("dim", &T::dim),
      UnsignedField("max_rows", &T::max_rows),
      UnsignedField("max_mb", &T::max_mb),
      UnsignedField("slots", &T::slots),
      {"admit",
       [](const YamlReader& reader, const YamlValue& v, T* t) {
         using A = AdmitOptions;
         const std::vector<YamlField<A>> admit = {
             UnsignedField("min_pushes", &A::min_pushes),
             FloatField("probability", &A::probability),
             UnsignedField("sketch_width", &A::sketch_width),
         };
         return ReadSection(reader, v, admit,
                            "a map with min_pushes, probability and sketch_width", &t->admit);
       }},
      {"evict",
       [](const YamlReader& reader, const YamlValue& v, T* t) {
         using E = EvictOptions;
         const std::vector<YamlField<E>> evict = {
             EnumField("policy", &E::policy, kEvictPolicyNames),
             UnsignedField("idle_clocks", &E::idle_clocks),
         };
         return ReadSection(reader, v, evict, "a map with policy (none, lru or lfu) and idle_clocks",
                            &t->evict);
       }},
      {"init",
       [](const YamlReader& reader, const YamlValue& v, T* t) { return ParseInit(reader, v, &t->init); }},
      {"optimizer",
       [](const YamlReader& reader, const YamlValue& v, T* t) {
         return ParseOptimizer(reader, v, &t->optimizer);
       }},
      {"wire",
       [](const YamlReader& reader, const YamlValue& v, T* t) {
         using W = WireOptions;
         const std::vector<YamlField<W>> wire = {
             EnumField("pull", &W::pull, kWireTypeNames),
             EnumField("push", &W::push, kWireTypeNames),
         };
         return ReadSection(reader, v, wire,
                            "a map with pull and push, each fp32, bf16 or fp16", &t->wire);
       }},
  };
  // A table's own optimizer replaces the job-wide one as a whole.
  table->optimizer = default_optimizer;
  return ReadSection(r, value, fields,
                     "a table: a map with name and rows, or name, keys: hashed and max_rows "
                     "or max_mb",
                     table);
}

Status ParseConsistency(const YamlReader& r, const YamlValue& value, ConsistencyOptions* c) {
  PS_ASSIGN_OR_RETURN(YamlMap map,
                      r.ReadMap(value, {"mode", "staleness", "aggregate", "backup_workers"},
                                "a map with mode (bsp, ssp, asp) and, for ssp, staleness"));
  PS_ASSIGN_OR_RETURN(const YamlValue* mode,
                      r.Required(map, "mode", "one of \"bsp\", \"ssp\", \"asp\""));
  PS_RETURN_IF_ERROR(r.ReadEnum(*mode, kConsistencyModeNames, &c->mode));
  if (const YamlValue* aggregate = map.Find("aggregate")) {
    PS_RETURN_IF_ERROR(r.ReadBool(*aggregate, &c->aggregate));
  }
  if (const YamlValue* backups = map.Find("backup_workers")) {
    PS_RETURN_IF_ERROR(r.ReadUnsigned(*backups, &c->backup_workers));
  }
  const YamlValue* staleness = map.Find("staleness");
  if (c->mode == ConsistencyMode::kSsp) {
    constexpr std::string_view kExpected =
        "a staleness >= 1 for mode ssp: how many clocks a worker may run ahead of the slowest";
    PS_ASSIGN_OR_RETURN(staleness, r.Required(map, "staleness", kExpected));
    PS_RETURN_IF_ERROR(r.ReadUnsigned(*staleness, &c->staleness));
  } else if (staleness != nullptr) {
    return r.Error(*staleness,
                   "not used by mode " + std::string(NameOf(kConsistencyModeNames, c->mode)),
                   "staleness only with mode ssp (bsp is staleness 0, asp is unbounded)");
  }
  return Status::Ok();
}

Status ParseLiveness(const YamlReader& r, const YamlValue& value, LivenessOptions* liveness) {
  using L = LivenessOptions;
  const std::vector<YamlField<L>> fields = {
      UnsignedField("heartbeat_ms", &L::heartbeat_ms),
      UnsignedField("timeout_ms", &L::timeout_ms),
      EnumField("on_dead_worker", &L::on_dead_worker, kDeadWorkerPolicyNames),
      UnsignedField("server_restarts", &L::server_restarts),
      UnsignedField("worker_restarts", &L::worker_restarts),
      UnsignedField("server_down_timeout_ms", &L::server_down_timeout_ms),
      UnsignedField("reconnect_ms", &L::reconnect_ms),
  };
  return ReadSection(r, value, fields, "", liveness);
}

Status ParseRendezvous(const YamlReader& r, const YamlValue& value, RendezvousOptions* rv) {
  const std::vector<YamlField<RendezvousOptions>> fields = {
      UnsignedField("timeout_ms", &RendezvousOptions::timeout_ms),
  };
  return ReadSection(r, value, fields, "", rv);
}

Status ParsePauseSteps(const YamlReader& r, const YamlValue& value, StragglerOptions* st) {
  constexpr std::string_view kExpected = "a list [min, max] of whole steps";
  PS_ASSIGN_OR_RETURN(std::vector<YamlValue> items, r.ReadList(value, kExpected));
  if (items.size() != 2) {
    return r.Error(value, "got " + std::to_string(items.size()) + " items", kExpected);
  }
  PS_RETURN_IF_ERROR(r.ReadUnsigned(items[0], &st->pause_min_steps));
  return r.ReadUnsigned(items[1], &st->pause_max_steps);
}

Status ParseStragglers(const YamlReader& r, const YamlValue& value, StragglerOptions* st) {
  using S = StragglerOptions;
  const std::vector<YamlField<S>> fields = {
      // A rank (so at most 2^32 - 1) in a signed field whose -1 means none.
      {"slow_worker",
       [](const YamlReader& reader, const YamlValue& v, S* s) {
         uint32_t rank = 0;
         PS_RETURN_IF_ERROR(reader.ReadUnsigned(v, &rank));
         s->slow_worker = rank;
         return Status::Ok();
       }},
      DoubleField("slow_factor", &S::slow_factor),
      DoubleField("pause_probability", &S::pause_probability),
      {"pause_steps", ParsePauseSteps},
      UnsignedField("seed", &S::seed),
      DoubleField("step_ms", &S::step_ms),
      BoolField("balance", &S::balance),
      UnsignedField("balance_window", &S::balance_window),
  };
  return ReadSection(r, value, fields, "", st);
}

Status ParseWorker(const YamlReader& r, const YamlValue& value, WorkerOptions* worker) {
  const std::vector<YamlField<WorkerOptions>> fields = {
      EnumField("device", &WorkerOptions::device, kDeviceKindNames),
      UnsignedField("cpu_threads", &WorkerOptions::cpu_threads),
  };
  return ReadSection(r, value, fields, "", worker);
}

Status ParseServer(const YamlReader& r, const YamlValue& value, ServerOptions* server) {
  using S = ServerOptions;
  const std::vector<YamlField<S>> fields = {
      UnsignedField("max_request_bytes", &S::max_request_bytes),
      UnsignedField("max_keys_per_request", &S::max_keys_per_request),
      UnsignedField("io_threads", &S::io_threads),
      BoolField("reject_non_finite", &S::reject_non_finite),
      EnumField("on_non_finite_result", &S::on_non_finite_result, kNonFiniteResultPolicyNames),
      UnsignedField("max_resume_clocks", &S::max_resume_clocks),
      BoolField("exit_when_workers_leave", &S::exit_when_workers_leave),
      UnsignedField("socket_hwm", &S::socket_hwm),
      UnsignedField("max_queued_reply_bytes", &S::max_queued_reply_bytes),
      UnsignedField("max_waiting_pulls_per_worker", &S::max_waiting_pulls_per_worker),
      UnsignedField("max_connections", &S::max_connections),
      UnsignedField("max_pull_wait_ms", &S::max_pull_wait_ms),
      BoolField("huge_pages", &S::huge_pages),
  };
  return ReadSection(r, value, fields, "a map of server limits", server);
}

Status ParseClient(const YamlReader& r, const YamlValue& value, ClientOptions* client) {
  using C = ClientOptions;
  const std::vector<YamlField<C>> fields = {
      UnsignedField("request_timeout_ms", &C::request_timeout_ms),
      UnsignedField("max_in_flight", &C::max_in_flight),
      UnsignedField("io_threads", &C::io_threads),
      UnsignedField("push_part_bytes", &C::push_part_bytes),
      BoolField("cache", &C::cache),
  };
  return ReadSection(r, value, fields, "a map of client settings", client);
}

Status ParseSecurity(const YamlReader& r, const YamlValue& value, SecurityOptions* security) {
  using S = SecurityOptions;
  const std::vector<YamlField<S>> fields = {
      EnumField("mode", &S::mode, kSecurityModeNames),
      {"keys_dir",
       [](const YamlReader& reader, const YamlValue& v, S* s) {
         PS_RETURN_IF_ERROR(reader.ReadString(v, "a folder of key files", &s->keys_dir));
         if (s->keys_dir.empty()) {
           return reader.Error(v, "an empty path", "the folder `ps_ctl keygen` wrote");
         }
         return Status::Ok();
       }},
  };
  return ReadSection(r, value, fields, "a map with mode (none, curve) and keys_dir", security);
}

Status ParseEtcd(const YamlReader& r, const YamlValue& value, EtcdOptions* etcd) {
  using E = EtcdOptions;
  const std::vector<YamlField<E>> fields = {
      {"endpoints",
       [](const YamlReader& reader, const YamlValue& v, E* e) {
         return ReadHostPorts(reader, v, "a list of etcd's \"host:port\" client URLs",
                              &e->endpoints);
       }},
      StringField("prefix", &E::prefix, "a key prefix such as /ps/myjob"),
      UnsignedField("lease_ttl_s", &E::lease_ttl_s),
      UnsignedField("request_timeout_ms", &E::request_timeout_ms),
      UnsignedField("start_timeout_ms", &E::start_timeout_ms),
  };
  return ReadSection(r, value, fields, "", etcd);
}

Status ParseReplication(const YamlReader& r, const YamlValue& value,
                        ReplicationOptions* replication) {
  using R = ReplicationOptions;
  const std::vector<YamlField<R>> fields = {
      UnsignedField("factor", &R::factor),
      UnsignedField("port_offset", &R::port_offset),
      BoolField("after_aggregation", &R::after_aggregation),
      EnumField("authority", &R::authority, kReplicationAuthorityNames),
      {"etcd",
       [](const YamlReader& reader, const YamlValue& v, R* o) {
         return ParseEtcd(reader, v, &o->etcd);
       }},
  };
  return ReadSection(r, value, fields, "", replication);
}

Status ParseMetrics(const YamlReader& r, const YamlValue& value, MetricsOptions* metrics) {
  using M = MetricsOptions;
  const std::vector<YamlField<M>> fields = {
      UnsignedField("port", &M::port),
      StringField("bind", &M::bind, "an address of this host such as 127.0.0.1 or 0.0.0.0"),
      UnsignedField("interval_ms", &M::interval_ms),
      UnsignedField("linger_ms", &M::linger_ms),
  };
  return ReadSection(r, value, fields, "", metrics);
}

Status ParseCheckpoint(const YamlReader& r, const YamlValue& value, CheckpointOptions* checkpoint) {
  using C = CheckpointOptions;
  const std::vector<YamlField<C>> fields = {
      {"dir",
       [](const YamlReader& reader, const YamlValue& v, C* c) {
         PS_RETURN_IF_ERROR(reader.ReadString(v, "a folder", &c->dir));
         if (c->dir.empty()) return reader.Error(v, "an empty path", "a folder");
         return Status::Ok();
       },
       "the folder of the checkpoints"},
      UnsignedField("every_clocks", &C::every_clocks),
      UnsignedField("keep", &C::keep),
      UnsignedField("full_every", &C::full_every),
      BoolField("sync", &C::sync),
      BoolField("restore", &C::restore),
  };
  return ReadSection(r, value, fields,
                     "a map with dir and, optionally, every_clocks, keep, full_every, sync, restore",
                     checkpoint);
}

// InternalError unless each of `sections` reads a different key of
// kJobSectionsOfOtherLayers.
Status CheckSections(std::span<const JobSection> sections) {
  for (size_t i = 0; i < sections.size(); ++i) {
    const std::string_view key = sections[i].key;
    if (std::find(std::begin(kJobSectionsOfOtherLayers), std::end(kJobSectionsOfOtherLayers),
                  key) == std::end(kJobSectionsOfOtherLayers)) {
      return InternalError("job section " + Quote(key) +
                           " is not a top-level key that another layer reads; declare it in "
                           "kJobSectionsOfOtherLayers (common/config.h)");
    }
    for (size_t j = 0; j < i; ++j) {
      if (sections[j].key == key) {
        return InternalError("job section " + Quote(key) + " is given two readers");
      }
    }
  }
  return Status::Ok();
}

// Turns one YAML document into JobOptions. Knows the schema of common's
// sections and hands the others to `sections`; leaves the value checks that
// need no YAML (ranges, cross-references) to Validate().
Status ParseJobDocument(const YamlReader& r, const YamlNode& root,
                        std::span<const JobSection> sections, JobOptions* job) {
  PS_ASSIGN_OR_RETURN(
      YamlMap top,
      r.ReadMap(YamlReader::Root(root), kTopLevelKeys, "a map with keys " + JoinNames(kTopLevelKeys)));
  PS_ASSIGN_OR_RETURN(const YamlValue* cluster,
                      r.Required(top, "cluster", "a map with servers and workers"));
  PS_RETURN_IF_ERROR(ParseCluster(r, *cluster, &job->cluster));

  // The job-wide optimizer is the default of every table, so it comes first.
  if (const YamlValue* optimizer = top.Find("optimizer")) {
    PS_RETURN_IF_ERROR(ParseOptimizer(r, *optimizer, &job->optimizer));
  }
  PS_ASSIGN_OR_RETURN(const YamlValue* tables, r.Required(top, "tables", "a list of tables"));
  PS_ASSIGN_OR_RETURN(std::vector<YamlValue> items,
                      r.ReadList(*tables, "a list of tables, each a map with name and rows"));
  job->tables.resize(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    PS_RETURN_IF_ERROR(ParseTable(r, items[i], job->optimizer, &job->tables[i]));
  }

  // The other sections, each optional, in this order.
  auto section = [&](std::string_view key, auto parse, auto* options) {
    const YamlValue* value = top.Find(key);
    return value == nullptr ? Status::Ok() : parse(r, *value, options);
  };
  PS_RETURN_IF_ERROR(section("consistency", ParseConsistency, &job->consistency));
  PS_RETURN_IF_ERROR(section("liveness", ParseLiveness, &job->liveness));
  PS_RETURN_IF_ERROR(section("rendezvous", ParseRendezvous, &job->rendezvous));
  PS_RETURN_IF_ERROR(section("stragglers", ParseStragglers, &job->stragglers));
  PS_RETURN_IF_ERROR(section("server", ParseServer, &job->server));
  PS_RETURN_IF_ERROR(section("client", ParseClient, &job->client));
  PS_RETURN_IF_ERROR(section("worker", ParseWorker, &job->worker));
  PS_RETURN_IF_ERROR(section("checkpoint", ParseCheckpoint, &job->checkpoint));
  PS_RETURN_IF_ERROR(section("security", ParseSecurity, &job->security));
  PS_RETURN_IF_ERROR(section("replication", ParseReplication, &job->replication));
  PS_RETURN_IF_ERROR(section("metrics", ParseMetrics, &job->metrics));
  // The sections of other layers: read by their layer's reader, or skipped.
  for (const JobSection& other : sections) {
    if (const YamlValue* value = top.Find(other.key)) PS_RETURN_IF_ERROR(other.read(r, *value));
  }
  return Status::Ok();
}

// The tables the job needs besides its own: under stragglers.balance the
// workers' rates (kBalanceTableName). InvalidArgument when a table of the
// file takes a reserved name.
Status AddInternalTables(JobOptions* job) {
  for (size_t i = 0; i < job->tables.size(); ++i) {
    if (job->tables[i].name == kBalanceTableName) {
      return InvalidOption(job->source, "tables[" + std::to_string(i) + "].name",
                           std::string(kBalanceTableName) + " is reserved",
                           "another name (stragglers.balance adds a table of that name)");
    }
  }
  if (job->stragglers.balance) {
    // Each worker's rate, in row `rank` (worker/batch_balance.h).
    TableOptions rates;
    rates.name = kBalanceTableName;
    rates.rows = std::max<uint32_t>(job->cluster.workers, 1);
    rates.dim = 1;
    rates.optimizer.kind = OptimizerKind::kAdd;
    job->tables.push_back(rates);
  }
  return Status::Ok();
}

}  // namespace

StatusOr<JobOptions> LoadJobString(const std::string& yaml_text, const std::string& source,
                                   std::span<const JobSection> sections) {
  PS_RETURN_IF_ERROR(CheckSections(sections));
  PS_ASSIGN_OR_RETURN(YamlDocument document, ReadYamlDocument(yaml_text, source));
  const YamlReader reader(source);
  if (document.documents() != 1) {
    return reader.Error("", YamlMark(),
                        document.documents() == 0 ? "the document is empty"
                                                  : "found more than one YAML document",
                        "one YAML document, a map with keys " + JoinNames(kTopLevelKeys));
  }
  JobOptions job;
  PS_RETURN_IF_ERROR(ParseJobDocument(reader, document.root(), sections, &job));
  job.source = source;
  PS_RETURN_IF_ERROR(reader.WithPosition(AddInternalTables(&job)));
  // The checks see options, not YAML: the reader adds where the value is.
  PS_RETURN_IF_ERROR(reader.WithPosition(job.Validate()));
  for (const JobSection& other : sections) {
    if (other.check) PS_RETURN_IF_ERROR(reader.WithPosition(other.check(job)));
  }
  return job;
}

StatusOr<JobOptions> LoadJobFile(const std::string& path, std::span<const JobSection> sections) {
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
  return LoadJobString(text.str(), path, sections);
}

}  // namespace ps
