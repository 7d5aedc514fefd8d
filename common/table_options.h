// A table's options: how its rows start (init), its server-side update rule
// (optimizer, with its learning-rate schedule) and its values' types on the
// wire; and the two pieces every section of the job file shares, the names of
// enum values and the wording of a bad option. common/options.h holds the
// rest of the job (JobOptions) and includes this.
#ifndef PS_COMMON_TABLE_OPTIONS_H_
#define PS_COMMON_TABLE_OPTIONS_H_

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ps {

// The name of an enum value as job files and logs spell it. Each enum below
// has one table of these, in the order messages list them; the loader reads
// names from it and the name functions print from it.
template <typename Enum>
struct EnumName {
  std::string_view name;
  Enum value;
};

// The name of `value` in `table`, or "unknown" when it has none.
template <typename Enum, size_t N>
constexpr std::string_view NameOf(const EnumName<Enum> (&table)[N], Enum value) {
  for (const EnumName<Enum>& entry : table) {
    if (entry.value == value) return entry.name;
  }
  return "unknown";
}

// The InvalidArgument of a bad option, as JobOptions::Validate() and the
// checks of the layers above word it: "<source>: <path>: <problem>;
// expected <expected>" (no "<source>: " when `source` is empty), e.g.
// "job.yaml: tables[1].rows: got 0; expected a row count >= 1".
Status InvalidOption(const std::string& source, std::string_view path, std::string_view problem,
                     std::string_view expected);

enum class InitKind { kZeros, kConstant, kUniform, kNormal };

inline constexpr EnumName<InitKind> kInitKindNames[] = {
    {"zeros", InitKind::kZeros},
    {"constant", InitKind::kConstant},
    {"uniform", InitKind::kUniform},
    {"normal", InitKind::kNormal},
};

// Initial values of a table's rows.
struct InitOptions {
  InitKind kind = InitKind::kZeros;
  // kConstant: the value. kUniform: values in [-scale, scale]. kNormal: stddev.
  float value = 0.0f;
  // Seed for kUniform and kNormal; a row's values depend only on (seed, row),
  // so every shard count gives the same initial model.
  uint64_t seed = 1;
};

// The update rules a table can use. Each has one entry in the registry of
// common/update_rule.h (its name in job files, parameters, state arrays,
// loop and bounds), made in a file of its own under common/update_rules/.
enum class OptimizerKind {
  kSgd,      // v = momentum * v + g; value -= lr * v (plain sgd when momentum is 0)
  kAdd,      // value += pushed (accumulators, counters, exact-sum tests)
  kAdagrad,  // s += g^2; value -= lr * g / (sqrt(s) + epsilon)
  kAdam,     // Kingma & Ba, with bias correction at step t = minimum clock + 1
  kFtrl,     // FTRL-Proximal (McMahan et al. 2013): value = w from state z and n
};

// Optimizer state arrays per value, at most, of any update rule: what the
// store keeps beside each table's values and what a checkpoint holds.
inline constexpr uint32_t kMaxOptimizerSlots = 2;

enum class LrDecay { kNone, kStep, kCosine };

inline constexpr EnumName<LrDecay> kLrDecayNames[] = {
    {"none", LrDecay::kNone},
    {"step", LrDecay::kStep},
    {"cosine", LrDecay::kCosine},
};

// A table's update rule, applied by the shard that owns each row. Its state
// (momentum, squared-gradient sums, Adam moments, FTRL's z and n) lives
// beside the values. Which fields a rule reads, and their allowed ranges,
// are its registry entry's (common/update_rule.h); the others must keep
// their defaults.
struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kSgd;
  // Learning rate (sgd, adagrad, adam); > 0 and finite. Default 0.01.
  float lr = 0.01f;
  // sgd: momentum in [0, 1). Default 0 (plain sgd, no state).
  float momentum = 0.0f;
  // adam: moment decay rates in [0, 1). Defaults 0.9, 0.999.
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  // adagrad, adam: added to the denominator; > 0. Default 1e-8.
  float epsilon = 1e-8f;
  // Learning-rate schedule over the shard's minimum clock c: linear warm-up
  // from lr / warmup_clocks to lr over the first warmup_clocks clocks, then
  // step (lr * gamma^floor(c / decay_every)) or cosine (to 0 at
  // decay_clocks) decay. Defaults: no warm-up, no decay.
  uint32_t warmup_clocks = 0;
  LrDecay decay = LrDecay::kNone;
  uint32_t decay_every = 0;   // step: clocks per step, >= 1
  float decay_gamma = 0.1f;   // step: factor per step, in (0, 1]
  uint32_t decay_clocks = 0;  // cosine: clocks to reach 0, >= 1
  // Regularization applied by the rule to every value a push touches
  // (lazily: rows no push touches are not decayed). l2: the gradient
  // becomes g + l2 * w (sgd, adagrad, adam). l1: after the step, w moves
  // toward 0 by l1 times the step's learning rate and stops at 0 (a
  // proximal step; sgd and adagrad, where it yields exact zeros). ftrl:
  // lambda1 and lambda2 of its closed form (w is exactly 0 while
  // |z| <= l1). >= 0, finite. Defaults 0.
  float l1 = 0.0f;
  float l2 = 0.0f;
  // ftrl: the per-coordinate learning rate alpha / (beta + sqrt(n)).
  // alpha > 0, beta >= 0, finite. Defaults 0.1 and 1 (McMahan et al.: "beta
  // = 1 is usually good enough").
  float alpha = 0.1f;
  float beta = 1.0f;

  // Arrays of state per value, at most kMaxOptimizerSlots: 0 (plain sgd,
  // add), 1 (momentum, adagrad), 2 (adam, ftrl). 0 for a kind the registry
  // does not know.
  uint32_t Slots() const;
  // The learning rate at minimum clock `clock` under the schedule.
  float LearningRate(int64_t clock) const;
  // True when a worker can reproduce the shard's update of its own push
  // exactly (no state, no schedule): the parameter cache mirrors only these.
  bool Stateless() const {
    return Slots() == 0 && warmup_clocks == 0 && decay == LrDecay::kNone && l1 == 0.0f &&
           l2 == 0.0f;
  }
};

// One key-value table of the model (DESIGN.md section 3).
// How a table's values travel between workers and shards
// (common/wire_floats.h): float32, bfloat16 or IEEE binary16. The header's
// dtype says which a message's values frame holds.
enum class WireType : uint32_t { kF32 = 0, kBf16 = 1, kF16 = 2 };

inline constexpr EnumName<WireType> kWireTypeNames[] = {
    {"fp32", WireType::kF32},
    {"bf16", WireType::kBf16},
    {"fp16", WireType::kF16},
};

// A table's `wire` section. Shards keep float32 values and optimizer state
// whatever these say; pulls are converted on the shard, pushes on the
// worker (with error feedback: what rounding leaves out of a push is added
// to the next one).
struct WireOptions {
  WireType pull = WireType::kF32;
  WireType push = WireType::kF32;
};

// How a table's rows are addressed (DESIGN.md section 15): rows 0..rows-1,
// split among the shards in ranges (`range`), or any uint64 id, the row
// made on the first push applied to it (`hashed`).
enum class KeyKind { kRange, kHashed };

inline constexpr EnumName<KeyKind> kKeyKindNames[] = {
    {"range", KeyKind::kRange},
    {"hashed", KeyKind::kHashed},
};

// A hashed table's hash slots when its job file does not say.
inline constexpr uint32_t kDefaultHashSlots = 4096;
// The most hash slots a table may have.
inline constexpr uint32_t kMaxHashSlots = uint32_t{1} << 20;

// The largest max_rows and max_mb of a hashed table (rows are numbered in
// 32 bits).
inline constexpr uint64_t kMaxHashedRows = uint64_t{UINT32_MAX} - 1;
inline constexpr uint64_t kMaxHashedMb = uint64_t{1} << 30;

// A hashed table's admission filter (`admit`): an id gets a row only at its
// min_pushes-th push (counted in a bounded sketch, store/push_sketch.h),
// and from then on each push without a row makes one with `probability`
// (a hash of the id and its count decides, so every replica decides
// alike). Until then its pushes are counted and dropped and its pulls read
// its initial value.
struct AdmitOptions {
  // 0 or 1: at the first push (no filter by count); at most 65535.
  uint32_t min_pushes = 0;
  // In (0, 1]; 1: every push that reached min_pushes.
  float probability = 1.0f;
  // Counters per row of the sketch (4 rows of 16-bit counters: 8 * width
  // bytes per shard and table); a power of two in [2^10, 2^26].
  uint32_t sketch_width = 1u << 20;

  // True when the filter is on (min_pushes > 1 or probability < 1).
  bool enabled() const { return min_pushes > 1 || probability < 1.0f; }
};

// What a hashed table's shard removes (`evict`), so that new ids keep
// getting rows: rows not pushed for `idle_clocks` clocks, and, at the
// table's memory bound, the rows `policy` picks, to make room for a push's
// new ids (DESIGN.md section 15). A row's use is a push that names it; an
// evicted id reads as its initial value again. Off by default: at the
// bound the rows of new ids are dropped.
enum class EvictPolicy { kNone, kLru, kLfu };

inline constexpr EnumName<EvictPolicy> kEvictPolicyNames[] = {
    {"none", EvictPolicy::kNone},
    {"lru", EvictPolicy::kLru},
    {"lfu", EvictPolicy::kLfu},
};

struct EvictOptions {
  // At the bound: none (drop the new ids' rows), lru (the least recently
  // pushed rows go first) or lfu (the rows pushed by the fewest pushes, in
  // classes 1, 2-3, 4-7, ..., go first; in a class the least recently
  // pushed).
  EvictPolicy policy = EvictPolicy::kNone;
  // Rows whose last push was idle_clocks or more clocks before the current
  // minimum clock go; 0: never for idleness.
  uint32_t idle_clocks = 0;

  // True when rows are ever evicted (each row then keeps its use: 24 bytes).
  bool enabled() const { return policy != EvictPolicy::kNone || idle_clocks > 0; }
};

struct TableOptions {
  // Unique, non-empty, [A-Za-z0-9_.-]. Table id = index in JobOptions::tables.
  std::string name;
  // Range tables: number of rows; >= 1. Rows are range-partitioned across
  // shards. Hashed tables: 0 (their rows are made on first touch).
  uint64_t rows = 0;
  // Floats per row; >= 1. Default 1.
  uint32_t dim = 1;
  InitOptions init;
  OptimizerOptions optimizer;
  WireOptions wire;
  KeyKind keys = KeyKind::kRange;
  // Hashed tables: the memory bound of each shard, as rows (max_rows) or
  // as MiB of rows and index (max_mb); exactly one of them, >= 1. 0 for
  // range tables.
  uint64_t max_rows = 0;
  uint64_t max_mb = 0;
  // Hashed tables: the number of hash slots ids map to (common/hash_slots.h),
  // 1..kMaxHashSlots and at least the number of shards; 0 means
  // kDefaultHashSlots. 0 for range tables.
  uint32_t slots = 0;
  // Hashed tables: the admission filter (off by default).
  AdmitOptions admit;
  // Hashed tables: what the shard evicts (off by default).
  EvictOptions evict;

  bool hashed() const { return keys == KeyKind::kHashed; }
  // The hash slots a hashed table has (`slots`, or its default).
  uint32_t HashSlots() const { return slots != 0 ? slots : kDefaultHashSlots; }
  // The seed of a hashed table's slot hash: XXH3-64 of its name
  // (common/hash_slots.h).
  uint64_t HashSeed() const;
  // The table's shape as the rendezvous and the job's fingerprint compare
  // it: "<name> rows=<rows> dim=<dim>" for a range table; for a hashed one
  // "<name> keys=hashed slots=<slots> max_rows=<n> dim=<dim>" (or max_mb),
  // then " admit=<min_pushes>,<probability>,<sketch_width>" when the
  // admission filter is on and " evict=<policy>,<idle_clocks>" when
  // eviction is.
  std::string Shape() const;
  // A hashed table's settings that decide its values besides its shape and
  // optimizer, as a checkpoint records them and a restore compares them:
  // "init=<type>,<value>,<seed>" (an id without a row reads its initial
  // value), then " admit=<min_pushes>,<probability>" when the admission
  // filter is on and " evict=<policy>,<idle_clocks>" when eviction is.
  // Empty for a range table (a restore replaces every row: its init no
  // longer counts).
  std::string HashedSettings() const;
};

// Every setting of an optimizer as one line of text ("sgd lr=0.01 ..."), to
// compare a checkpoint's optimizer with the job's.
std::string OptimizerDescription(const OptimizerOptions& optimizer);

// The checks of an optimizer's settings at YAML path `at` (the job-wide
// `optimizer` or a table's); OK, or InvalidArgument naming the path.
Status ValidateOptimizer(const std::string& source, const std::string& at,
                         const OptimizerOptions& optimizer);

// The tables section's checks (names unique and well formed, rows, dim,
// init, optimizer and wire values); OK, or InvalidArgument naming the
// table's path in `source` (InvalidOption).
Status ValidateTables(const std::string& source, const std::vector<TableOptions>& tables);

}  // namespace ps

#endif  // PS_COMMON_TABLE_OPTIONS_H_
