// The plan of one reshard (server/reshard_gate.h): what ps_ctl reshard
// decided, for ps_launch to start the servers of the next shard map. A
// small text file in the job's checkpoint folder,
// <checkpoint.dir>/reshard-<epoch>.plan:
//   epoch 1
//   clock 120
//   config /abs/path/job3.yaml
// written whole (a temporary file renamed) before the handover is
// committed, so a server that hands over always has its plan on disk.
//
// Thread-safe: plain functions.
#ifndef PS_TOOLS_RESHARD_PLAN_H_
#define PS_TOOLS_RESHARD_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace ps {

struct ReshardPlan {
  int64_t epoch = 0;   // the next shard map's
  int64_t clock = 0;   // the handover clock: generation `clock` holds the rows
  std::string config;  // the job file of the next map (absolute path)
  // The next map's servers follow the old ones' rows in memory
  // (server/reshard_follower.h): ps_launch starts them at once. A plan
  // without the line says no.
  bool follow = false;
};

// <checkpoint_dir>/reshard-<epoch>.plan
std::string ReshardPlanPath(const std::string& checkpoint_dir, int64_t epoch);
// Writes `plan` there. Internal or PermissionDenied naming the path.
Status WriteReshardPlan(const std::string& checkpoint_dir, const ReshardPlan& plan);
// Removes the plan of map `epoch` (an aborted reshard); OK when there is none.
Status RemoveReshardPlan(const std::string& checkpoint_dir, int64_t epoch);
// Removes every plan in `checkpoint_dir` (a folder that does not exist
// holds none); the paths it removed, in name order.
StatusOr<std::vector<std::string>> RemoveReshardPlans(const std::string& checkpoint_dir);
// Reads the plan of map `epoch`. NotFound when there is none; DataLoss
// naming the path and line when it does not read as a plan of that epoch.
StatusOr<ReshardPlan> ReadReshardPlan(const std::string& checkpoint_dir, int64_t epoch);

}  // namespace ps

#endif  // PS_TOOLS_RESHARD_PLAN_H_
