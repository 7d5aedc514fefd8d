// ps_ctl reshard: moves a running job onto another number of servers
// (server/reshard_gate.h says how the shards hand over).
//
//   ps_ctl reshard --config job.yaml --to job3.yaml [--wait-s 120]
//                  [--through-generation]
//
// job.yaml is the file the job runs on now (its servers are asked), and
// job3.yaml the same job on other servers: only cluster.servers may differ,
// and the servers both list keep their places (the next map's list starts
// with the current one's servers, or the current one's with the next
// one's), so that a server's address keeps its rows' neighbours. The job
// needs checkpoint.dir (the handover generation is written there, and the
// plan for ps_launch).
//
// Steps, each said on stdout: every shard's map and worker clocks (STATS);
// when the next map's servers may follow the old ones in memory
// (common/reshard_sources.h: CanFollow), the plan without a clock, and a
// wait of at most 3 s until they (every replica of each, in a replicated
// job) follow (ps_launch starts them), 60 s until they hold their copies;
// prepare at clock c, a few clocks past the fastest worker (a shard that
// saw a worker reach c refuses: all abort and it is tried again later, at
// most 5 times); the plan for ps_launch (tools/reshard_plan.h); commit;
// then it waits until every server of the next map answers at its epoch,
// and prints how long the job did not take writes.
#ifndef PS_TOOLS_CTL_RESHARD_H_
#define PS_TOOLS_CTL_RESHARD_H_

#include <cstdint>
#include <string>

#include "common/options.h"

namespace ps {

// Exit code: 0 when the job runs on the next map's servers; 1 when the
// reshard failed (the error is printed; the job goes on as it was unless
// the handover had begun); 2 on a bad --to file.
// `in_memory`: the next servers follow the old ones' rows where the job
// allows it (false: --through-generation).
int RunReshard(const JobOptions& job, const std::string& to_path, uint32_t wait_s,
               uint32_t timeout_ms, bool in_memory = true);

}  // namespace ps

#endif  // PS_TOOLS_CTL_RESHARD_H_
