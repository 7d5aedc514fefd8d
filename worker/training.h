// Small pieces shared by ps_worker's training programs.
#ifndef PS_WORKER_TRAINING_H_
#define PS_WORKER_TRAINING_H_

#include <cmath>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace ps {

// FailedPrecondition when a step's loss is NaN or infinite: training has
// diverged, and the message says what to change.
inline Status CheckLossFinite(double loss, uint32_t rank, int64_t step) {
  if (std::isfinite(loss)) return Status::Ok();
  return FailedPreconditionError("worker " + std::to_string(rank) + ": loss became " +
                                 std::to_string(loss) + " at step " + std::to_string(step) +
                                 "; lower the table's optimizer.lr");
}

}  // namespace ps

#endif  // PS_WORKER_TRAINING_H_
