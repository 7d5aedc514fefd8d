// The update rules a table's optimizer applies to pushed values. Shared by
// the shard (which owns the values and the optimizer state) and the
// worker's parameter cache (which mirrors the worker's own pushes for the
// stateless rules), so both compute exactly the same floats.
#ifndef PS_COMMON_UPDATE_RULE_H_
#define PS_COMMON_UPDATE_RULE_H_

#include <cstddef>
#include <cstdint>

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

// One step of `optimizer` on w[0..n) for the pushed gradient g[0..n), at
// learning rate `lr`. `slot0` and `slot1` are the rule's state arrays
// (optimizer.Slots() of them, each n floats, zero at the start; null when
// unused): sgd's momentum, adagrad's squared-gradient sums, adam's first
// and second moments. `step` (>= 1) is adam's step for bias correction.
// REQUIRES: w, g and the slots do not overlap.
void ApplyOptimizer(const OptimizerOptions& optimizer, float* w, float* slot0, float* slot1,
                    const float* g, size_t n, float lr, int64_t step);

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
void StepBounds(const OptimizerOptions& optimizer, const double before[3], double max_grad,
                float lr, int64_t step, double after[3]);

}  // namespace ps

#endif  // PS_COMMON_UPDATE_RULE_H_
