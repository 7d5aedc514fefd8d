#include "common/table_options.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <string>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>

#include "common/hash_slots.h"
#include "common/text.h"
#include "common/update_rule.h"
#include "common/yaml_reader.h"

namespace ps {

Status InvalidOption(const std::string& source, std::string_view path,
               std::string_view problem, std::string_view expected) {
  std::string message;
  if (!source.empty()) message.append(source).append(": ");
  message.append(path).append(": ").append(problem);
  message.append("; expected ").append(expected);
  return InvalidArgumentError(message);
}

namespace {

// "a, b, c": the names of an enum's table.
template <typename Enum, size_t N>
std::string NameList(const EnumName<Enum> (&table)[N]) {
  std::string out;
  for (const EnumName<Enum>& entry : table) {
    if (!out.empty()) out.append(", ");
    out.append(entry.name);
  }
  return out;
}

std::string TablePath(size_t index, std::string_view field = {}) {
  std::string path = "tables[" + std::to_string(index) + "]";
  if (!field.empty()) path.append(".").append(field);
  return path;
}

bool IsValidTableName(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

Status ValidateInit(const std::string& source, size_t index,
                    const InitOptions& init) {
  switch (init.kind) {
    case InitKind::kZeros:
      return Status::Ok();
    case InitKind::kConstant:
      if (!std::isfinite(init.value)) {
        return InvalidOption(source, TablePath(index, "init.value"),
                       "got " + FloatText(init.value), "a finite number");
      }
      return Status::Ok();
    case InitKind::kUniform:
    case InitKind::kNormal: {
      const char* field =
          init.kind == InitKind::kUniform ? "init.scale" : "init.stddev";
      if (!std::isfinite(init.value) || init.value < 0.0f) {
        return InvalidOption(source, TablePath(index, field),
                       "got " + FloatText(init.value), "a finite number >= 0");
      }
      return Status::Ok();
    }
  }
  return InvalidOption(
      source, TablePath(index, "init.type"),
      "unknown init kind " + std::to_string(static_cast<int>(init.kind)),
      "one of " + NameList(kInitKindNames));
}

// The names of the rules that take parameter `key` ("sgd, adagrad").
std::string RulesTaking(std::string_view key) {
  std::vector<std::string_view> names;
  for (const UpdateRule* rule : UpdateRules()) {
    for (const OptimizerParameter& p : rule->parameters) {
      if (p.key == key) names.push_back(rule->name);
    }
  }
  return JoinNames(names);
}

bool InRange(const OptimizerParameter& p, float v) {
  if (!std::isfinite(v)) return false;
  if (v < p.min || (p.min_excluded && v == p.min)) return false;
  return v < p.max || (!p.max_excluded && v == p.max);
}

}  // namespace

// `at` is the optimizer's YAML path: "optimizer" (the job-wide one) or
// "tables[i].optimizer". The rule's own parameters are checked against
// their ranges; a parameter of other rules must keep its default, so that
// a setting is never silently ignored.
Status ValidateOptimizer(const std::string& source, const std::string& at,
                         const OptimizerOptions& optimizer) {
  auto path = [&at](std::string_view field) { return at + "." + std::string(field); };
  const UpdateRule* rule = FindRule(optimizer.kind);
  if (rule == nullptr) {
    return InvalidOption(source, path("type"),
                         "unknown optimizer kind " +
                             std::to_string(static_cast<int>(optimizer.kind)),
                         "one of " + JoinNames(OptimizerNames()));
  }
  if (rule->scheduled && (!std::isfinite(optimizer.lr) || !(optimizer.lr > 0.0f))) {
    return InvalidOption(source, path("lr"), "got " + FloatText(optimizer.lr),
                   "a finite learning rate > 0");
  }
  for (const OptimizerParameter& p : rule->parameters) {
    if (!InRange(p, optimizer.*p.field)) {
      return InvalidOption(source, path(p.key), "got " + FloatText(optimizer.*p.field),
                           std::string(p.want));
    }
  }
  const OptimizerOptions defaults;
  for (const UpdateRule* other : UpdateRules()) {
    for (const OptimizerParameter& p : other->parameters) {
      const bool own = std::any_of(rule->parameters.begin(), rule->parameters.end(),
                                   [&p](const OptimizerParameter& q) { return q.key == p.key; });
      const float value = optimizer.*p.field;
      if (own || value == defaults.*p.field) continue;
      return InvalidOption(source, path(p.key),
                           "got " + FloatText(value) + " on type " + std::string(rule->name),
                           std::string(p.key) + " only with " + RulesTaking(p.key) +
                               " (others keep its default " + FloatText(defaults.*p.field) + ")");
    }
  }
  if (optimizer.decay == LrDecay::kStep &&
      (optimizer.decay_every < 1 || !(optimizer.decay_gamma > 0.0f && optimizer.decay_gamma <= 1.0f))) {
    return InvalidOption(source, path("decay"),
                   "step decay every " + std::to_string(optimizer.decay_every) + " clocks by " +
                       FloatText(optimizer.decay_gamma),
                   "decay_every >= 1 and decay_gamma in (0, 1]");
  }
  if (optimizer.decay == LrDecay::kCosine && optimizer.decay_clocks < 1) {
    return InvalidOption(source, path("decay_clocks"),
                   "got " + std::to_string(optimizer.decay_clocks),
                   "decay_clocks >= 1 for cosine decay");
  }
  return Status::Ok();
}

// A range table: rows, and none of the hashed tables' keys.
Status ValidateRangeKeys(const std::string& source, size_t i, const TableOptions& table) {
  constexpr std::string_view kOnlyHashed = "only for keys: hashed";
  const AdmitOptions no_admit;
  const bool admit_set = table.admit.min_pushes != no_admit.min_pushes ||
                         table.admit.probability != no_admit.probability ||
                         table.admit.sketch_width != no_admit.sketch_width;
  if (admit_set) {
    return InvalidOption(source, TablePath(i, "admit"), "set on a table of keys: range",
                         std::string(kOnlyHashed) + " (a range table has a row for every id)");
  }
  if (table.evict.enabled()) {
    return InvalidOption(source, TablePath(i, "evict"), "set on a table of keys: range",
                         std::string(kOnlyHashed) + " (a range table keeps every row)");
  }
  const std::pair<std::string_view, uint64_t> hashed_only[] = {
      {"max_rows", table.max_rows}, {"max_mb", table.max_mb}, {"slots", table.slots}};
  for (const auto& [key, value] : hashed_only) {
    if (value != 0) {
      return InvalidOption(source, TablePath(i, key),
                           "got " + std::to_string(value) + " for a table of keys: range",
                           std::string(kOnlyHashed) + " (a range table has rows instead)");
    }
  }
  if (table.rows < 1) {
    return InvalidOption(source, TablePath(i, "rows"), "got " + std::to_string(table.rows),
                         "a row count >= 1 (or keys: hashed, for rows keyed by any id)");
  }
  return Status::Ok();
}

// A hashed table: no rows, one memory bound, a slot count.
Status ValidateHashedKeys(const std::string& source, size_t i, const TableOptions& table) {
  if (table.rows != 0) {
    return InvalidOption(source, TablePath(i, "rows"),
                         "got " + std::to_string(table.rows) + " for a table of keys: hashed",
                         "no rows: a hashed table makes a row on the first push to an id; "
                         "bound each shard's memory with max_rows or max_mb");
  }
  if ((table.max_rows == 0) == (table.max_mb == 0)) {
    return InvalidOption(
        source, TablePath(i),
        table.max_rows == 0 ? "a hashed table without a memory bound"
                            : "both max_rows and max_mb",
        "one of max_rows (rows per shard, >= 1) or max_mb (MiB of rows and index per "
        "shard, >= 1), so that no shard grows without limit");
  }
  if (table.max_rows > kMaxHashedRows) {
    return InvalidOption(source, TablePath(i, "max_rows"),
                         "got " + std::to_string(table.max_rows),
                         "at most " + std::to_string(kMaxHashedRows) + " rows per shard");
  }
  if (table.max_mb > kMaxHashedMb) {
    return InvalidOption(source, TablePath(i, "max_mb"), "got " + std::to_string(table.max_mb),
                         "at most 2^30 MiB per shard");
  }
  const AdmitOptions& admit = table.admit;
  if (admit.min_pushes > 65535) {
    return InvalidOption(source, TablePath(i, "admit.min_pushes"),
                         "got " + std::to_string(admit.min_pushes),
                         "at most 65535 (the sketch counts in 16 bits)");
  }
  if (!(admit.probability > 0.0f && admit.probability <= 1.0f)) {
    return InvalidOption(source, TablePath(i, "admit.probability"),
                         fmt::format("got {}", admit.probability), "a probability in (0, 1]");
  }
  if (admit.sketch_width < (1u << 10) || admit.sketch_width > (1u << 26) ||
      (admit.sketch_width & (admit.sketch_width - 1)) != 0) {
    return InvalidOption(source, TablePath(i, "admit.sketch_width"),
                         "got " + std::to_string(admit.sketch_width),
                         "a power of two in [1024, 67108864] (8 bytes per counter column)");
  }
  if (table.slots > kMaxHashSlots) {
    return InvalidOption(source, TablePath(i, "slots"), "got " + std::to_string(table.slots),
                         "a slot count in [1, " + std::to_string(kMaxHashSlots) + "]");
  }
  return Status::Ok();
}

Status ValidateTables(const std::string& source,
                      const std::vector<TableOptions>& tables) {
  if (tables.empty()) {
    return InvalidOption(source, "tables", "no tables",
                   "a list of at least one table");
  }
  // name -> index of the table that has it
  std::unordered_map<std::string, size_t> names;
  for (size_t i = 0; i < tables.size(); ++i) {
    const TableOptions& table = tables[i];
    if (!IsValidTableName(table.name)) {
      return InvalidOption(
          source, TablePath(i, "name"),
          table.name.empty() ? "empty name" : "got " + Quote(table.name),
          "a non-empty name of letters, digits, '_', '.', '-'");
    }
    auto [it, inserted] = names.emplace(table.name, i);
    if (!inserted) {
      return InvalidOption(source, TablePath(i, "name"),
                     Quote(table.name) + " is already the name of " +
                         TablePath(it->second),
                     "unique table names");
    }
    if (table.dim < 1) {
      return InvalidOption(source, TablePath(i, "dim"),
                     "got " + std::to_string(table.dim),
                     "a dim (floats per row) >= 1");
    }
    if (table.hashed()) {
      PS_RETURN_IF_ERROR(ValidateHashedKeys(source, i, table));
    } else {
      PS_RETURN_IF_ERROR(ValidateRangeKeys(source, i, table));
    }
    // A shard may hold every row, so the whole table must be addressable
    // in bytes.
    constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
    if (table.rows > kMax / table.dim / sizeof(float)) {
      return InvalidOption(source, TablePath(i),
                     "rows (" + std::to_string(table.rows) + ") * dim (" +
                         std::to_string(table.dim) +
                         ") floats overflow a 64-bit byte count",
                     "rows * dim * 4 < 2^64");
    }
    PS_RETURN_IF_ERROR(ValidateInit(source, i, table.init));
    PS_RETURN_IF_ERROR(ValidateOptimizer(source, TablePath(i, "optimizer"), table.optimizer));
  }
  return Status::Ok();
}

uint64_t TableOptions::HashSeed() const { return NameHash(name); }

std::string TableOptions::Shape() const {
  if (!hashed()) return fmt::format("{} rows={} dim={}", name, rows, dim);
  const std::string bound = max_rows != 0 ? fmt::format("max_rows={}", max_rows)
                                          : fmt::format("max_mb={}", max_mb);
  std::string shape = fmt::format("{} keys=hashed slots={} {} dim={}", name, HashSlots(), bound, dim);
  if (admit.enabled()) {
    shape += fmt::format(" admit={},{},{}", admit.min_pushes, admit.probability, admit.sketch_width);
  }
  if (evict.enabled()) {
    shape += fmt::format(" evict={},{}", NameOf(kEvictPolicyNames, evict.policy), evict.idle_clocks);
  }
  return shape;
}

std::string TableOptions::HashedSettings() const {
  if (!hashed()) return "";
  std::string text =
      fmt::format("init={},{},{}", NameOf(kInitKindNames, init.kind), init.value, init.seed);
  if (admit.enabled()) text += fmt::format(" admit={},{}", admit.min_pushes, admit.probability);
  if (evict.enabled()) {
    text += fmt::format(" evict={},{}", NameOf(kEvictPolicyNames, evict.policy), evict.idle_clocks);
  }
  return text;
}

float OptimizerOptions::LearningRate(int64_t clock) const {
  const double c = static_cast<double>(std::max<int64_t>(clock, 0));
  double rate = lr;
  if (warmup_clocks > 0 && c < warmup_clocks) return static_cast<float>(lr * (c + 1) / warmup_clocks);
  const double after = c - warmup_clocks;
  switch (decay) {
    case LrDecay::kNone:
      break;
    case LrDecay::kStep:
      rate *= std::pow(static_cast<double>(decay_gamma), std::floor(after / decay_every));
      break;
    case LrDecay::kCosine:
      rate *= after >= decay_clocks ? 0.0 : 0.5 * (1.0 + std::cos(3.141592653589793 * after / decay_clocks));
      break;
  }
  return static_cast<float>(rate);
}

std::string OptimizerDescription(const OptimizerOptions& o) {
  // The fields every description has carried, for every rule, so that the
  // optimizer texts of checkpoints written so far still compare equal; a
  // rule's other parameters follow as key=value.
  constexpr std::string_view kAlwaysDescribed[] = {"momentum", "beta1", "beta2",
                                                   "epsilon",  "l1",    "l2"};
  std::string text = fmt::format(
      "{} lr={} momentum={} beta1={} beta2={} epsilon={} warmup_clocks={} decay={} "
      "decay_every={} decay_gamma={} decay_clocks={} l1={} l2={}",
      OptimizerName(o.kind), o.lr, o.momentum, o.beta1, o.beta2, o.epsilon,
      o.warmup_clocks, NameOf(kLrDecayNames, o.decay), o.decay_every, o.decay_gamma,
      o.decay_clocks, o.l1, o.l2);
  if (const UpdateRule* rule = FindRule(o.kind)) {
    for (const OptimizerParameter& p : rule->parameters) {
      if (std::find(std::begin(kAlwaysDescribed), std::end(kAlwaysDescribed), p.key) !=
          std::end(kAlwaysDescribed)) {
        continue;
      }
      text += fmt::format(" {}={}", p.key, o.*p.field);
    }
  }
  return text;
}

}  // namespace ps
