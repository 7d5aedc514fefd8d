// The update rules a table's optimizer applies to pushed values. Shared by
// the shard (which owns the values and the optimizer state) and the
// worker's parameter cache (which mirrors the worker's own pushes for the
// stateless rules), so both compute exactly the same floats.
#ifndef PS_COMMON_UPDATE_RULE_H_
#define PS_COMMON_UPDATE_RULE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "common/options.h"

namespace ps {

// While alive, this thread's float arithmetic flushes subnormal inputs and
// results (magnitudes below 1.18e-38) to zero: x86's MXCSR FTZ and DAZ,
// aarch64's FPCR FZ; the previous mode comes back at the end of the scope.
// Every update rule runs so (ApplyOptimizer and ApplyUpdate set it
// themselves), and the shard and the parameter cache alike, so both keep
// computing the same floats. Why: a momentum or Adam slot whose coordinate
// stops receiving gradients decays geometrically into the subnormal range,
// where each x86 operation costs a microcode assist (measured: the MLP's
// shards spent 35% of the job's CPU in the momentum loop under ssp). A
// subnormal weight or slot is zero for training's purposes. Costs a
// register read when the mode is set already: scope one around a loop of
// many small applies (a sparse push's rows).
class FlushSubnormals {
 public:
  FlushSubnormals();
  ~FlushSubnormals();
  FlushSubnormals(const FlushSubnormals&) = delete;
  FlushSubnormals& operator=(const FlushSubnormals&) = delete;

 private:
  uint64_t saved_;
  bool changed_;
};

// The state arrays of one run of values: element k is state array k of
// the rule (optimizer.Slots() of them are used, each n floats, zero at the
// start; the rest null).
using OptimizerSlots = std::array<float*, kMaxOptimizerSlots>;

// Bounds on magnitudes: [0] the values, [1 + k] state array k.
using StateBounds = double[1 + kMaxOptimizerSlots];
// The same as float bit patterns without sign (MaxAbsBits).
using StateBits = uint32_t[1 + kMaxOptimizerSlots];

// One float parameter of an update rule: its key in the job file (the
// optimizer section), the field of OptimizerOptions that holds it (whose
// in-class initializer is its default) and its allowed range. Values are
// finite; `min` is allowed unless `min_excluded`, `max` (+inf: no limit)
// unless `max_excluded`. `want` says what is allowed ("a momentum in
// [0, 1)").
struct OptimizerParameter {
  std::string_view key;
  float OptimizerOptions::*field;
  float min;
  bool min_excluded;
  float max;
  bool max_excluded;
  std::string_view want;
};

// One update rule: everything the rest of the server knows of it. The
// registry (UpdateRules()) holds one per OptimizerKind, each made in its
// own file under common/update_rules/. Immutable; safe to read from any
// thread.
struct UpdateRule {
  OptimizerKind kind;
  // Its `type` in the job file's optimizer section, in logs and in the
  // optimizer text of checkpoints.
  std::string_view name;
  // Takes `lr` and its schedule (warmup_clocks, decay, ...): ApplyOptimizer
  // passes it the scheduled rate. A rule without them ignores `lr`.
  bool scheduled;
  // Its parameters besides type and the schedule, in the order a message
  // lists them. A parameter not listed must stay at its default.
  std::span<const OptimizerParameter> parameters;
  // What each state array holds, in the order the store, snapshots and
  // checkpoints keep them (state array k is slot_names[k]).
  std::array<std::string_view, kMaxOptimizerSlots> slot_names;
  // Its number of state arrays under `optimizer` (<= kMaxOptimizerSlots).
  uint32_t (*slots)(const OptimizerOptions& optimizer);
  // One step on w[0..n) as ApplyOptimizer below promises; called once per
  // run of values, with subnormals flushed already.
  void (*apply)(const OptimizerOptions& optimizer, float* w, const OptimizerSlots& slots,
                const float* g, size_t n, float lr, int64_t step);
  // StepBounds below for this rule.
  void (*bounds)(const OptimizerOptions& optimizer, const StateBounds& before, double max_grad,
                 float lr, int64_t step, StateBounds& after);
};

// Every update rule, in the order messages list them (sgd, add, adagrad,
// adam, ftrl).
std::span<const UpdateRule* const> UpdateRules();

// Every rule's name, in the same order.
std::vector<std::string_view> OptimizerNames();

// The rule of `kind`, or null for a kind the registry does not know (a
// value cast from an integer).
const UpdateRule* FindRule(OptimizerKind kind);

// The rule named `name` in job files, or null.
const UpdateRule* FindRule(std::string_view name);

// The name of `kind` in job files, or "unknown".
std::string_view OptimizerName(OptimizerKind kind);

// One step of `optimizer` on w[0..n) for the pushed gradient g[0..n), at
// learning rate `lr`. `slots` are the rule's state arrays (see
// OptimizerSlots): sgd's momentum, adagrad's squared-gradient sums, adam's
// first and second moments, ftrl's z and n. `step` (>= 1) is adam's step
// for bias correction. Does nothing for a kind the registry does not know.
// REQUIRES: w, g and the slots do not overlap.
void ApplyOptimizer(const OptimizerOptions& optimizer, float* w, const OptimizerSlots& slots,
                    const float* g, size_t n, float lr, int64_t step);

// ApplyOptimizer with the rule looked up already (`rule` is
// *FindRule(optimizer.kind)): for a caller that applies many runs of one
// table.
void ApplyRule(const UpdateRule& rule, const OptimizerOptions& optimizer, float* w,
               const OptimizerSlots& slots, const float* g, size_t n, float lr, int64_t step);

// The stateless rules (plain sgd at optimizer.lr, add) without state.
// REQUIRES: optimizer.Slots() == 0.
void ApplyUpdate(const OptimizerOptions& optimizer, float* w, const float* g, size_t n);

// True when every one of v[0..n) is finite (no NaN, no Inf). One
// vectorized pass over the bit patterns.
bool AllFinite(const float* v, size_t n);

// The largest magnitude among v[0..n) as the bit pattern of a float without
// its sign (these order as the magnitudes do): at least kNonFiniteBits when
// an Inf or a NaN is among them; 0 for n == 0. One vectorized pass.
uint32_t MaxAbsBits(const float* v, size_t n);
inline constexpr uint32_t kNonFiniteBits = 0x7f800000u;

// What one step of `optimizer` (at learning rate `lr`, Adam step `step`, as
// ApplyOptimizer takes them) can produce, from bounds on what it reads:
// before[0] bounds |value|, before[1 + k] |state array k| (k < Slots()),
// `max_grad` |pushed value|. Writes into after[0..Slots()] bounds on the
// magnitudes after the step, rounding included (+Inf when nothing can be
// promised). A store that keeps such bounds knows a push cannot overflow
// without saving what it overwrites.
void StepBounds(const OptimizerOptions& optimizer, const StateBounds& before, double max_grad,
                float lr, int64_t step, StateBounds& after);

}  // namespace ps

#endif  // PS_COMMON_UPDATE_RULE_H_
