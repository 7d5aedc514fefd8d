#include "common/config.h"
#include "common/text.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

namespace ps {
namespace {

constexpr std::string_view kTopLevelKeys =
    "cluster, tables, consistency, liveness, stragglers, optimizer, server, client, worker, "
    "train, checkpoint";

// A node of the document with the YAML path that leads to it
// ("tables[0].init.type") and where it is in the text.
struct Value {
  YAML::Node node;
  std::string path;
  YAML::Mark mark;
};

std::string ChildPath(const std::string& path, std::string_view key) {
  if (path.empty()) return std::string(key);
  return path + "." + std::string(key);
}

std::string IndexPath(const std::string& path, size_t index) {
  return path + "[" + std::to_string(index) + "]";
}



std::string JoinKeys(std::initializer_list<std::string_view> keys) {
  std::string out;
  for (std::string_view key : keys) {
    if (!out.empty()) out.append(", ");
    out.append(key);
  }
  return out;
}

// "a map", "a list", "an empty value", "\"abc\"" or "the quoted string \"5\"".
std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "an empty value";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Scalar:
      if (node.Tag() == "!") return "the quoted string " + Quote(node.Scalar());
      return Quote(node.Scalar());
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

// True for a scalar that YAML would resolve to a number or boolean: plain
// (unquoted) or explicitly tagged with the core tag `core_tag`. A quoted "64"
// is a string in YAML, and silently reading it as a number would hide typos
// such as a quoted list.
bool IsPlainScalar(const YAML::Node& node, std::string_view core_tag) {
  const std::string& tag = node.Tag();
  return tag == "?" || tag == "tag:yaml.org,2002:" + std::string(core_tag);
}

enum class NumberParse { kOk, kNotANumber, kOutOfRange };

// YAML 1.2 core-schema floats: 1, -2.5, 1e-3, .5, .inf, -.inf, .nan.
NumberParse ParseDouble(std::string_view text, double* out) {
  bool negative = false;
  std::string_view body = text;
  if (!body.empty() && (body.front() == '+' || body.front() == '-')) {
    negative = body.front() == '-';
    body.remove_prefix(1);
  }
  if (body == ".inf" || body == ".Inf" || body == ".INF") {
    *out = negative ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
    return NumberParse::kOk;
  }
  if (body == text && (body == ".nan" || body == ".NaN" || body == ".NAN")) {
    *out = std::numeric_limits<double>::quiet_NaN();
    return NumberParse::kOk;
  }
  // from_chars also accepts "inf", "nan" and "infinity", which YAML does not.
  if (body.empty() ||
      body.find_first_not_of("0123456789.eE+-") != std::string_view::npos ||
      !(std::isdigit(static_cast<unsigned char>(body.front())) ||
        body.front() == '.')) {
    return NumberParse::kNotANumber;
  }
  double value = 0.0;
  auto [end, ec] = std::from_chars(body.data(), body.data() + body.size(),
                                   value, std::chars_format::general);
  if (end != body.data() + body.size()) return NumberParse::kNotANumber;
  if (ec == std::errc::result_out_of_range) return NumberParse::kOutOfRange;
  if (ec != std::errc()) return NumberParse::kNotANumber;
  *out = negative ? -value : value;
  return NumberParse::kOk;
}

// The keys of one YAML map, checked against the keys allowed there.
class Map {
 public:
  Map(std::string path, YAML::Mark mark)
      : path_(std::move(path)), mark_(mark) {}

  const std::string& path() const { return path_; }
  const YAML::Mark& mark() const { return mark_; }
  const std::vector<std::pair<std::string, Value>>& entries() const {
    return entries_;
  }

  // The value of `key`, or nullptr when the map does not have it.
  const Value* Find(std::string_view key) const {
    for (const auto& [name, value] : entries_) {
      if (name == key) return &value;
    }
    return nullptr;
  }

  void Add(std::string key, Value value) {
    entries_.emplace_back(std::move(key), std::move(value));
  }

 private:
  std::string path_;
  YAML::Mark mark_;
  std::vector<std::pair<std::string, Value>> entries_;
};

// Turns one YAML document into JobOptions. Knows the schema; leaves the
// value checks that need no YAML (ranges, cross-references) to Validate().
class JobParser {
 public:
  explicit JobParser(const std::string& source) : source_(source) {}

  Status Parse(const YAML::Node& root, JobOptions* job) const {
    Value document{root, "", root.Mark()};
    PS_ASSIGN_OR_RETURN(
        Map top,
        ReadMap(document,
                {"cluster", "tables", "consistency", "liveness", "stragglers",
                 "optimizer", "server", "client", "worker", "train", "checkpoint"},
                "a map with keys " + std::string(kTopLevelKeys)));

    PS_ASSIGN_OR_RETURN(
        const Value* cluster,
        Required(top, "cluster", "a map with servers and workers"));
    PS_RETURN_IF_ERROR(ParseCluster(*cluster, &job->cluster));

    // The job-wide optimizer is the default of every table, so it comes
    // first.
    OptimizerOptions default_optimizer;
    if (const Value* optimizer = top.Find("optimizer")) {
      // Validate() sees only the tables' copies of this one and would name
      // their paths, so its values are checked here, where they are written.
      PS_RETURN_IF_ERROR(ParseOptimizer(*optimizer, /*check_values=*/true,
                                        &default_optimizer));
    }

    PS_ASSIGN_OR_RETURN(const Value* tables,
                        Required(top, "tables", "a list of tables"));
    PS_ASSIGN_OR_RETURN(std::vector<Value> items,
                        ReadList(*tables,
                                 "a list of tables, each a map "
                                 "with name and rows"));
    job->tables.resize(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      PS_RETURN_IF_ERROR(
          ParseTable(items[i], default_optimizer, &job->tables[i]));
    }

    if (const Value* consistency = top.Find("consistency")) {
      PS_RETURN_IF_ERROR(ParseConsistency(*consistency, &job->consistency));
    }
    if (const Value* liveness = top.Find("liveness")) {
      PS_RETURN_IF_ERROR(ParseLiveness(*liveness, &job->liveness));
    }
    if (const Value* stragglers = top.Find("stragglers")) {
      PS_RETURN_IF_ERROR(ParseStragglers(*stragglers, &job->stragglers));
    }
    if (const Value* server = top.Find("server")) {
      PS_RETURN_IF_ERROR(ParseServer(*server, &job->server));
    }
    if (const Value* client = top.Find("client")) {
      PS_RETURN_IF_ERROR(ParseClient(*client, &job->client));
    }
    if (const Value* worker = top.Find("worker")) {
      PS_ASSIGN_OR_RETURN(Map map, ReadMap(*worker, {"device", "cpu_threads"},
                                           "a map with device, cpu_threads"));
      if (const Value* device = map.Find("device")) {
        PS_ASSIGN_OR_RETURN(size_t index, ReadEnum(*device, {"auto", "cpu", "cuda"}));
        job->worker.device = static_cast<DeviceKind>(index);
      }
      if (const Value* v = map.Find("cpu_threads")) {
        PS_RETURN_IF_ERROR(ReadUnsigned(*v, &job->worker.cpu_threads));
      }
    }
    if (const Value* train = top.Find("train")) {
      PS_RETURN_IF_ERROR(ParseTrain(*train, &job->train));
    }
    if (const Value* checkpoint = top.Find("checkpoint")) {
      PS_RETURN_IF_ERROR(ParseCheckpoint(*checkpoint, &job->checkpoint));
    }
    return Status::Ok();
  }

  // "<source>: <path>: <problem>; expected <expected> (line L, column C)".
  Status Error(const std::string& path, const YAML::Mark& mark,
               std::string_view problem, std::string_view expected) const {
    std::string message;
    if (!source_.empty()) message.append(source_).append(": ");
    message.append(path.empty() ? "(top level)" : path);
    message.append(": ").append(problem);
    message.append("; expected ").append(expected);
    if (!mark.is_null()) {
      message.append(" (line " + std::to_string(mark.line + 1) + ", column " +
                     std::to_string(mark.column + 1) + ")");
    }
    return InvalidArgumentError(message);
  }

  Status Error(const Value& value, std::string_view problem,
               std::string_view expected) const {
    return Error(value.path, value.mark, problem, expected);
  }

 private:
  // Reads a map whose keys must be among `allowed`. `expected` describes the
  // map for a value of the wrong type.
  StatusOr<Map> ReadMap(const Value& value,
                        std::initializer_list<std::string_view> allowed,
                        const std::string& expected) const {
    if (!value.node.IsMap()) {
      return Error(value, "got " + Describe(value.node), expected);
    }
    Map map(value.path, value.mark);
    for (auto it = value.node.begin(); it != value.node.end(); ++it) {
      const YAML::Node key = it->first;
      if (!key.IsScalar()) {
        return Error(value.path, key.Mark(), "a key is " + Describe(key),
                     "plain names as keys: " + JoinKeys(allowed));
      }
      const std::string& name = key.Scalar();
      const std::string path = ChildPath(value.path, name);
      bool known = false;
      for (std::string_view candidate : allowed) known |= candidate == name;
      if (!known) {
        return Error(path, key.Mark(), "unknown key",
                     "one of " + JoinKeys(allowed));
      }
      if (const Value* first = map.Find(name)) {
        return Error(path, key.Mark(),
                     "duplicate key (first at line " +
                         std::to_string(first->mark.line + 1) + ")",
                     "each key once");
      }
      // An empty value has no position of its own; point at its key.
      const YAML::Node node = it->second;
      map.Add(name,
              Value{node, path, node.IsNull() ? key.Mark() : node.Mark()});
    }
    return map;
  }

  StatusOr<const Value*> Required(const Map& map, std::string_view key,
                                  std::string_view expected) const {
    const Value* value = map.Find(key);
    if (value == nullptr) {
      return Error(ChildPath(map.path(), key), map.mark(),
                   "missing required key", expected);
    }
    return value;
  }

  StatusOr<std::vector<Value>> ReadList(const Value& value,
                                        std::string_view expected) const {
    if (!value.node.IsSequence()) {
      return Error(value, "got " + Describe(value.node), expected);
    }
    std::vector<Value> items;
    for (const YAML::Node& item : value.node) {
      // An empty item has no position of its own; point at the list.
      items.push_back(Value{item, IndexPath(value.path, items.size()),
                            item.IsNull() ? value.mark : item.Mark()});
    }
    return items;
  }

  Status ReadUnsigned(const Value& value, uint64_t max, uint64_t* out) const {
    const std::string expected = "an integer in 0.." + std::to_string(max);
    const YAML::Node& node = value.node;
    if (!node.IsScalar() || !IsPlainScalar(node, "int")) {
      return Error(value, "got " + Describe(node), expected);
    }
    const std::string& text = node.Scalar();
    std::string_view digits = text;
    bool negative = false;
    if (!digits.empty() && (digits.front() == '+' || digits.front() == '-')) {
      negative = digits.front() == '-';
      digits.remove_prefix(1);
    }
    if (digits.empty() ||
        digits.find_first_not_of("0123456789") != std::string_view::npos) {
      double ignored = 0.0;
      if (ParseDouble(text, &ignored) != NumberParse::kNotANumber) {
        return Error(value, "got " + text + ", which is not a whole number",
                     expected);
      }
      return Error(value, "got " + Describe(node), expected);
    }
    if (negative && digits.find_first_not_of('0') != std::string_view::npos) {
      return Error(value, "got " + text + ", a negative number", expected);
    }
    uint64_t parsed = 0;
    auto [end, ec] =
        std::from_chars(digits.data(), digits.data() + digits.size(), parsed);
    if (ec == std::errc::result_out_of_range || parsed > max) {
      return Error(value, "got " + text + ", which is too large", expected);
    }
    if (ec != std::errc() || end != digits.data() + digits.size()) {
      return Error(value, "got " + Describe(node), expected);
    }
    *out = parsed;
    return Status::Ok();
  }

  template <typename T>
  Status ReadUnsigned(const Value& value, T* out) const {
    uint64_t parsed = 0;
    PS_RETURN_IF_ERROR(
        ReadUnsigned(value, std::numeric_limits<T>::max(), &parsed));
    *out = static_cast<T>(parsed);
    return Status::Ok();
  }

  Status ReadFloat(const Value& value, float* out) const {
    constexpr std::string_view kExpected =
        "a number (e.g. 0.05, 1e-3, .inf, .nan) that fits a 32-bit float";
    const YAML::Node& node = value.node;
    if (!node.IsScalar() || !IsPlainScalar(node, "float")) {
      return Error(value, "got " + Describe(node), kExpected);
    }
    double parsed = 0.0;
    switch (ParseDouble(node.Scalar(), &parsed)) {
      case NumberParse::kOk:
        break;
      case NumberParse::kNotANumber:
        return Error(value, "got " + Describe(node), kExpected);
      case NumberParse::kOutOfRange:
        return Error(value, "got " + node.Scalar() + ", which is out of range",
                     kExpected);
    }
    constexpr double kFloatMax = std::numeric_limits<float>::max();
    if (std::isfinite(parsed) && std::fabs(parsed) > kFloatMax) {
      return Error(value, "got " + node.Scalar() + ", which is too large",
                   kExpected);
    }
    const float narrowed = static_cast<float>(parsed);
    if (parsed != 0.0 && narrowed == 0.0f) {
      return Error(value, "got " + node.Scalar() + ", which is too small",
                   kExpected);
    }
    *out = narrowed;
    return Status::Ok();
  }

  Status ReadBool(const Value& value, bool* out) const {
    constexpr std::string_view kExpected = "true or false";
    const YAML::Node& node = value.node;
    if (node.IsScalar() && IsPlainScalar(node, "bool")) {
      const std::string& text = node.Scalar();
      if (text == "true" || text == "True" || text == "TRUE") {
        *out = true;
        return Status::Ok();
      }
      if (text == "false" || text == "False" || text == "FALSE") {
        *out = false;
        return Status::Ok();
      }
    }
    return Error(value, "got " + Describe(node), kExpected);
  }

  Status ReadString(const Value& value, std::string_view expected,
                    std::string* out) const {
    if (!value.node.IsScalar()) {
      return Error(value, "got " + Describe(value.node), expected);
    }
    *out = value.node.Scalar();
    return Status::Ok();
  }

  // Reads value as one of `names`; returns its index in `names`.
  StatusOr<size_t> ReadEnum(
      const Value& value, std::initializer_list<std::string_view> names) const {
    const std::string expected = "one of " + JoinKeys(names);
    std::string text;
    PS_RETURN_IF_ERROR(ReadString(value, expected, &text));
    size_t index = 0;
    for (std::string_view name : names) {
      if (name == text) return index;
      ++index;
    }
    return Error(value, "got " + Describe(value.node), expected);
  }

  // Fails if `map` has a key that `what` (init, optimizer) of type `type`
  // does not use, e.g. seed with init type constant.
  Status CheckKeysForType(
      const Map& map, std::string_view what, std::string_view type,
      std::initializer_list<std::string_view> allowed) const {
    for (const auto& [key, value] : map.entries()) {
      bool ok = false;
      for (std::string_view candidate : allowed) ok |= candidate == key;
      if (!ok) {
        return Error(
            value,
            "not used by " + std::string(what) + " type " + std::string(type),
            "only the keys " + JoinKeys(allowed));
      }
    }
    return Status::Ok();
  }

  Status ParseCluster(const Value& value, ClusterOptions* cluster) const {
    PS_ASSIGN_OR_RETURN(Map map,
                        ReadMap(value, {"servers", "workers", "allow_remote"},
                                "a map with servers and workers"));
    constexpr std::string_view kServers =
        "a list of \"host:port\" strings, one per shard";
    PS_ASSIGN_OR_RETURN(const Value* servers,
                        Required(map, "servers", kServers));
    PS_ASSIGN_OR_RETURN(std::vector<Value> items, ReadList(*servers, kServers));
    cluster->servers.clear();
    for (const Value& item : items) {
      std::string server;
      PS_RETURN_IF_ERROR(ReadString(item, "a \"host:port\" string", &server));
      cluster->servers.push_back(std::move(server));
    }
    PS_ASSIGN_OR_RETURN(
        const Value* workers,
        Required(map, "workers", "the number of worker processes, >= 1"));
    PS_RETURN_IF_ERROR(ReadUnsigned(*workers, &cluster->workers));
    if (const Value* allow_remote = map.Find("allow_remote")) {
      PS_RETURN_IF_ERROR(ReadBool(*allow_remote, &cluster->allow_remote));
    }
    return Status::Ok();
  }

  Status ParseInit(const Value& value, InitOptions* init) const {
    PS_ASSIGN_OR_RETURN(
        Map map, ReadMap(value, {"type", "value", "scale", "stddev", "seed"},
                         "a map with type (zeros, constant, uniform, normal) "
                         "and its parameters"));
    *init = InitOptions();
    std::string_view type = "zeros";
    if (const Value* type_value = map.Find("type")) {
      PS_ASSIGN_OR_RETURN(
          size_t index,
          ReadEnum(*type_value, {"zeros", "constant", "uniform", "normal"}));
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
      if (const Value* parameter = map.Find(key)) {
        PS_RETURN_IF_ERROR(ReadFloat(*parameter, &init->value));
      }
    }
    if (const Value* seed = map.Find("seed")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*seed, &init->seed));
    }
    return Status::Ok();
  }

  // With `check_values`, also rejects what Validate() would reject.
  Status ParseOptimizer(const Value& value, bool check_values,
                        OptimizerOptions* optimizer) const {
    const std::string_view kSchedule[] = {"warmup_clocks", "decay", "decay_every", "decay_gamma",
                                          "decay_clocks"};
    PS_ASSIGN_OR_RETURN(
        Map map, ReadMap(value,
                         {"type", "lr", "momentum", "beta1", "beta2", "epsilon", "warmup_clocks",
                          "decay", "decay_every", "decay_gamma", "decay_clocks", "l1", "l2"},
                         "a map with type (sgd, add, adagrad, adam) and its parameters"));
    *optimizer = OptimizerOptions();
    std::string_view type = "sgd";
    if (const Value* type_value = map.Find("type")) {
      PS_ASSIGN_OR_RETURN(size_t index,
                          ReadEnum(*type_value, {"sgd", "add", "adagrad", "adam"}));
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
    if (const Value* lr = map.Find("lr")) {
      PS_RETURN_IF_ERROR(ReadFloat(*lr, &optimizer->lr));
      if (check_values &&
          !(std::isfinite(optimizer->lr) && optimizer->lr > 0)) {
        return Error(*lr, "got " + FloatText(optimizer->lr),
                     "a finite learning rate > 0");
      }
    }
    if (const Value* v = map.Find("momentum")) PS_RETURN_IF_ERROR(ReadFloat(*v, &optimizer->momentum));
    if (const Value* v = map.Find("beta1")) PS_RETURN_IF_ERROR(ReadFloat(*v, &optimizer->beta1));
    if (const Value* v = map.Find("beta2")) PS_RETURN_IF_ERROR(ReadFloat(*v, &optimizer->beta2));
    if (const Value* v = map.Find("epsilon")) PS_RETURN_IF_ERROR(ReadFloat(*v, &optimizer->epsilon));
    if (const Value* v = map.Find("warmup_clocks")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &optimizer->warmup_clocks));
    }
    if (const Value* v = map.Find("decay")) {
      PS_ASSIGN_OR_RETURN(size_t index, ReadEnum(*v, {"none", "step", "cosine"}));
      optimizer->decay = static_cast<LrDecay>(index);
    }
    if (const Value* v = map.Find("decay_every")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &optimizer->decay_every));
    }
    if (const Value* v = map.Find("decay_gamma")) {
      PS_RETURN_IF_ERROR(ReadFloat(*v, &optimizer->decay_gamma));
    }
    if (const Value* v = map.Find("decay_clocks")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &optimizer->decay_clocks));
    }
    if (const Value* v = map.Find("l1")) PS_RETURN_IF_ERROR(ReadFloat(*v, &optimizer->l1));
    if (const Value* v = map.Find("l2")) PS_RETURN_IF_ERROR(ReadFloat(*v, &optimizer->l2));
    return Status::Ok();
  }

  Status ParseTable(const Value& value,
                    const OptimizerOptions& default_optimizer,
                    TableOptions* table) const {
    PS_ASSIGN_OR_RETURN(
        Map map, ReadMap(value, {"name", "rows", "dim", "init", "optimizer"},
                         "a table: a map with name and rows"));
    PS_ASSIGN_OR_RETURN(const Value* name,
                        Required(map, "name", "the table's name"));
    PS_RETURN_IF_ERROR(ReadString(*name, "a table name", &table->name));
    PS_ASSIGN_OR_RETURN(
        const Value* rows,
        Required(map, "rows", "the table's number of rows, >= 1"));
    PS_RETURN_IF_ERROR(ReadUnsigned(*rows, &table->rows));
    if (const Value* dim = map.Find("dim")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*dim, &table->dim));
    }
    if (const Value* init = map.Find("init")) {
      PS_RETURN_IF_ERROR(ParseInit(*init, &table->init));
    }
    // A table's own optimizer replaces the job-wide one as a whole.
    table->optimizer = default_optimizer;
    if (const Value* optimizer = map.Find("optimizer")) {
      PS_RETURN_IF_ERROR(ParseOptimizer(*optimizer, /*check_values=*/false,
                                        &table->optimizer));
    }
    return Status::Ok();
  }

  Status ParseConsistency(const Value& value, ConsistencyOptions* c) const {
    PS_ASSIGN_OR_RETURN(Map map, ReadMap(value, {"mode", "staleness", "aggregate"},
                                         "a map with mode (bsp, ssp, asp) and, for ssp, "
                                         "staleness"));
    PS_ASSIGN_OR_RETURN(const Value* mode,
                        Required(map, "mode", "one of \"bsp\", \"ssp\", \"asp\""));
    PS_ASSIGN_OR_RETURN(size_t index, ReadEnum(*mode, {"bsp", "ssp", "asp"}));
    c->mode = static_cast<ConsistencyMode>(index);
    if (const Value* aggregate = map.Find("aggregate")) {
      PS_RETURN_IF_ERROR(ReadBool(*aggregate, &c->aggregate));
    }
    const Value* staleness = map.Find("staleness");
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

  Status ParseLiveness(const Value& value, LivenessOptions* l) const {
    PS_ASSIGN_OR_RETURN(
        Map map, ReadMap(value,
                         {"heartbeat_ms", "timeout_ms", "on_dead_worker", "server_restarts",
                          "server_down_timeout_ms"},
                         "a map with heartbeat_ms, timeout_ms, on_dead_worker, server_restarts, "
                         "server_down_timeout_ms"));
    if (const Value* v = map.Find("server_restarts")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &l->server_restarts));
    }
    if (const Value* v = map.Find("server_down_timeout_ms")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &l->server_down_timeout_ms));
    }
    if (const Value* v = map.Find("heartbeat_ms")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &l->heartbeat_ms));
    }
    if (const Value* v = map.Find("timeout_ms")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &l->timeout_ms));
    }
    if (const Value* v = map.Find("on_dead_worker")) {
      PS_ASSIGN_OR_RETURN(size_t index, ReadEnum(*v, {"fail", "drop"}));
      l->on_dead_worker = static_cast<DeadWorkerPolicy>(index);
    }
    return Status::Ok();
  }

  Status ParseStragglers(const Value& value, StragglerOptions* st) const {
    PS_ASSIGN_OR_RETURN(
        Map map, ReadMap(value,
                         {"slow_worker", "slow_factor", "pause_probability", "pause_steps", "seed",
                          "step_ms"},
                         "a map with slow_worker, slow_factor, pause_probability, pause_steps, "
                         "seed, step_ms"));
    if (const Value* v = map.Find("slow_worker")) {
      uint32_t rank = 0;
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &rank));
      st->slow_worker = rank;
    }
    if (const Value* v = map.Find("slow_factor")) {
      float f = 0;
      PS_RETURN_IF_ERROR(ReadFloat(*v, &f));
      st->slow_factor = f;
    }
    if (const Value* v = map.Find("pause_probability")) {
      float p = 0;
      PS_RETURN_IF_ERROR(ReadFloat(*v, &p));
      st->pause_probability = p;
    }
    if (const Value* v = map.Find("pause_steps")) {
      PS_ASSIGN_OR_RETURN(std::vector<Value> items,
                          ReadList(*v, "a list [min, max] of whole steps"));
      if (items.size() != 2) {
        return Error(*v, "got " + std::to_string(items.size()) + " items",
                     "a list [min, max] of whole steps");
      }
      PS_RETURN_IF_ERROR(ReadUnsigned(items[0], &st->pause_min_steps));
      PS_RETURN_IF_ERROR(ReadUnsigned(items[1], &st->pause_max_steps));
    }
    if (const Value* v = map.Find("seed")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &st->seed));
    }
    if (const Value* v = map.Find("step_ms")) {
      float ms = 0;
      PS_RETURN_IF_ERROR(ReadFloat(*v, &ms));
      st->step_ms = ms;
    }
    return Status::Ok();
  }

  Status ParseCheckpoint(const Value& value, CheckpointOptions* checkpoint) const {
    PS_ASSIGN_OR_RETURN(Map map, ReadMap(value, {"dir", "every_clocks", "keep", "sync", "restore"},
                                         "a map with dir and, optionally, every_clocks, keep, "
                                         "sync, restore"));
    PS_ASSIGN_OR_RETURN(const Value* dir,
                        Required(map, "dir", "the folder of the checkpoints"));
    PS_RETURN_IF_ERROR(ReadString(*dir, "a folder", &checkpoint->dir));
    if (checkpoint->dir.empty()) return Error(*dir, "an empty path", "a folder");
    if (const Value* v = map.Find("every_clocks")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &checkpoint->every_clocks));
    }
    if (const Value* v = map.Find("keep")) PS_RETURN_IF_ERROR(ReadUnsigned(*v, &checkpoint->keep));
    if (const Value* v = map.Find("sync")) PS_RETURN_IF_ERROR(ReadBool(*v, &checkpoint->sync));
    if (const Value* v = map.Find("restore")) {
      PS_RETURN_IF_ERROR(ReadBool(*v, &checkpoint->restore));
    }
    return Status::Ok();
  }

  Status ParseServer(const Value& value, ServerOptions* server) const {
    PS_ASSIGN_OR_RETURN(Map map, ReadMap(value,
                                         {"max_request_bytes",
                                          "max_keys_per_request", "io_threads",
                                          "reject_non_finite"},
                                         "a map of server limits"));
    if (const Value* v = map.Find("max_request_bytes")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &server->max_request_bytes));
    }
    if (const Value* v = map.Find("max_keys_per_request")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &server->max_keys_per_request));
    }
    if (const Value* v = map.Find("io_threads")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &server->io_threads));
    }
    if (const Value* v = map.Find("reject_non_finite")) {
      PS_RETURN_IF_ERROR(ReadBool(*v, &server->reject_non_finite));
    }
    return Status::Ok();
  }

  Status ParseClient(const Value& value, ClientOptions* client) const {
    PS_ASSIGN_OR_RETURN(
        Map map,
        ReadMap(value, {"request_timeout_ms", "max_in_flight", "io_threads", "push_part_bytes",
                        "cache"},
                "a map of client settings"));
    if (const Value* v = map.Find("request_timeout_ms")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &client->request_timeout_ms));
    }
    if (const Value* v = map.Find("max_in_flight")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &client->max_in_flight));
    }
    if (const Value* v = map.Find("push_part_bytes")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &client->push_part_bytes));
    }
    if (const Value* v = map.Find("cache")) {
      PS_RETURN_IF_ERROR(ReadBool(*v, &client->cache));
    }
    if (const Value* v = map.Find("io_threads")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &client->io_threads));
    }
    return Status::Ok();
  }

  Status ParseTrain(const Value& value, TrainOptions* train) const {
    PS_ASSIGN_OR_RETURN(
        Map map,
        ReadMap(value,
                {"program", "table", "user_table", "item_table", "features", "layers",
                 "eval_every", "data_dir", "samples_per_worker", "test_samples",
                 "observe_probability", "test_fraction", "batch_size", "iterations", "noise",
                 "seed", "log_every", "metrics_csv"},
                "a map with the training program's settings"));
    // A train section is what makes a job a training job.
    train->program = TrainProgram::kLinearRegression;
    if (const Value* v = map.Find("program")) {
      PS_ASSIGN_OR_RETURN(size_t index,
                          ReadEnum(*v, {"linear_regression", "mlp", "sparse_logistic_regression",
                                        "matrix_factorization"}));
      const TrainProgram programs[] = {TrainProgram::kLinearRegression, TrainProgram::kMlp,
                                       TrainProgram::kSparseLogisticRegression,
                                       TrainProgram::kMatrixFactorization};
      train->program = programs[index];
    }
    if (const Value* v = map.Find("table")) {
      PS_RETURN_IF_ERROR(ReadString(*v, "a table name", &train->table));
    }
    if (const Value* v = map.Find("user_table")) {
      PS_RETURN_IF_ERROR(ReadString(*v, "a table name", &train->user_table));
    }
    if (const Value* v = map.Find("item_table")) {
      PS_RETURN_IF_ERROR(ReadString(*v, "a table name", &train->item_table));
    }
    if (train->program == TrainProgram::kSparseLogisticRegression ||
        train->program == TrainProgram::kMatrixFactorization) {
      if (const Value* v = map.Find("features")) {
        PS_RETURN_IF_ERROR(ReadUnsigned(*v, &train->features));
      }
    } else if (train->program == TrainProgram::kLinearRegression) {
      constexpr std::string_view kFeatures =
          "the number of features, >= 1 and equal to the rows of train.table "
          "(omit the train section for a job without training)";
      PS_ASSIGN_OR_RETURN(const Value* features, Required(map, "features", kFeatures));
      PS_RETURN_IF_ERROR(ReadUnsigned(*features, &train->features));
      if (train->features == 0) return Error(*features, "got 0", kFeatures);
    } else {
      constexpr std::string_view kLayers = "a list of layer sizes, e.g. [784, 100, 10]";
      PS_ASSIGN_OR_RETURN(const Value* layers, Required(map, "layers", kLayers));
      PS_ASSIGN_OR_RETURN(std::vector<Value> items, ReadList(*layers, kLayers));
      train->layers.resize(items.size());
      for (size_t i = 0; i < items.size(); ++i) {
        PS_RETURN_IF_ERROR(ReadUnsigned(items[i], &train->layers[i]));
      }
    }
    if (const Value* v = map.Find("eval_every")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &train->eval_every));
    }
    if (const Value* v = map.Find("data_dir")) {
      PS_RETURN_IF_ERROR(ReadString(*v, "a folder", &train->data_dir));
    }
    if (const Value* v = map.Find("samples_per_worker")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &train->samples_per_worker));
    }
    if (const Value* v = map.Find("test_samples")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &train->test_samples));
    }
    if (const Value* v = map.Find("observe_probability")) {
      float p = 0;
      PS_RETURN_IF_ERROR(ReadFloat(*v, &p));
      train->observe_probability = p;
    }
    if (const Value* v = map.Find("test_fraction")) {
      float f = 0;
      PS_RETURN_IF_ERROR(ReadFloat(*v, &f));
      train->test_fraction = f;
    }
    if (const Value* v = map.Find("metrics_csv")) {
      PS_RETURN_IF_ERROR(ReadString(*v, "a file path", &train->metrics_csv));
    }
    if (const Value* v = map.Find("batch_size")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &train->batch_size));
    }
    if (const Value* v = map.Find("iterations")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &train->iterations));
    }
    if (const Value* v = map.Find("noise")) {
      PS_RETURN_IF_ERROR(ReadFloat(*v, &train->noise));
    }
    if (const Value* v = map.Find("seed")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &train->seed));
    }
    if (const Value* v = map.Find("log_every")) {
      PS_RETURN_IF_ERROR(ReadUnsigned(*v, &train->log_every));
    }
    return Status::Ok();
  }

  const std::string source_;
};

// Walks the documents of a YAML stream without building nodes, to count them.
//
// yaml-cpp 0.7's LoadAll() never returns on some malformed input: on a token
// that cannot start a node (a ',' at the top level, or after "[a]") each
// HandleNextDocument() reports another empty document without consuming
// anything (jbeder/yaml-cpp#1040; fixed upstream in 2024 by #1319, after
// every release this project builds with). So the walk is bounded, and a
// document that starts where the previous one started is reported as the
// syntax error it is.
class DocumentWalker final : public YAML::EventHandler {
 public:
  struct Result {
    int documents = 0;    // counted up to 2; more are not needed
    bool stuck = false;   // the parser stopped making progress
    YAML::Mark stuck_at;  // where, when stuck
  };

  // Throws what yaml-cpp throws on a syntax error.
  static Result Walk(const std::string& text) {
    std::istringstream stream(text);
    YAML::Parser parser(stream);
    DocumentWalker walker;
    Result result;
    // A third document is parsed only to tell "two documents" from "stuck
    // after one".
    while (result.documents < 3 && parser.HandleNextDocument(walker)) {
      if (result.documents > 0 && walker.start_.pos == walker.previous_.pos) {
        result.stuck = true;
        result.stuck_at = walker.start_;
        return result;
      }
      walker.previous_ = walker.start_;
      ++result.documents;
    }
    result.documents = std::min(result.documents, 2);
    return result;
  }

  void OnDocumentStart(const YAML::Mark& mark) override { start_ = mark; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

 private:
  YAML::Mark start_;
  YAML::Mark previous_;
};

Status SyntaxError(const std::string& source, const YAML::Mark& mark,
                   std::string_view what) {
  std::string message;
  if (!source.empty()) message.append(source).append(": ");
  if (!mark.is_null()) {
    message.append("line " + std::to_string(mark.line + 1) + ", column " +
                   std::to_string(mark.column + 1) + ": ");
  }
  message.append("YAML syntax error: ").append(what);
  message.append(
      "; expected well-formed YAML (check brackets, commas, quotes, and "
      "indentation, which must use spaces, not tabs)");
  return InvalidArgumentError(message);
}

// Parses `text` into *job; the one place that catches yaml-cpp's exceptions.
Status ParseJob(const std::string& text, const std::string& source,
                JobOptions* job) {
  try {
    const DocumentWalker::Result walk = DocumentWalker::Walk(text);
    if (walk.stuck) {
      const size_t pos = static_cast<size_t>(walk.stuck_at.pos);
      return SyntaxError(source, walk.stuck_at,
                         pos < text.size()
                             ? "unexpected " + std::string(1, text[pos])
                             : "unexpected end of input");
    }
    JobParser parser(source);
    if (walk.documents != 1) {
      return parser.Error(
          "", YAML::Mark::null_mark(),
          walk.documents == 0 ? "the document is empty"
                              : "found more than one YAML document",
          "one YAML document, a map with keys " + std::string(kTopLevelKeys));
    }
    // Load() builds the first document only, which is the only one.
    return parser.Parse(YAML::Load(text), job);
  } catch (const YAML::Exception& e) {
    // ParserException (syntax) and anything else yaml-cpp raises while
    // reading: both mean the text is not a YAML document we can read.
    return SyntaxError(source, e.mark, e.msg);
  } catch (const std::exception& e) {
    return InternalError((source.empty() ? "" : source + ": ") +
                         "reading the YAML document failed: " + e.what());
  }
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
