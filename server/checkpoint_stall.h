// The crash-point test hook of ps_server: a setting "<stage>:<clock>" that
// freezes every checkpoint write of a generation of clock >= <clock> when
// it reaches <stage> (CheckpointStage, server/checkpoint.h), so a test can
// kill the process there (tests/server/checkpoint_crash_test.cc). ps_server
// takes the text from the environment variable PS_CHECKPOINT_TEST_STALL
// (server/main.cc); nothing else reads it. Never set it for a real job: a
// stalled write also blocks the shard's next checkpoint and its shutdown.
#ifndef PS_SERVER_CHECKPOINT_STALL_H_
#define PS_SERVER_CHECKPOINT_STALL_H_

#include <cstdint>
#include <string_view>

#include "common/status.h"
#include "server/checkpoint.h"

namespace ps {

struct StallPoint {
  CheckpointStage stage = CheckpointStage::kCreated;
  int64_t clock = 0;  // writes of generations of this clock and later stall
};

// Parses "<stage>:<clock>" (a stage name of CheckpointStageName, a decimal
// clock >= 0). InvalidArgument saying what is wrong and what is expected
// otherwise. Pure.
StatusOr<StallPoint> ParseStallPoint(std::string_view text);

// The hook to pass as CheckpointWriteOptions::at_stage for the setting
// `text`, which came from `source` (the variable's name, for log lines):
//   empty: no hook (an empty function);
//   not parsable: no hook, and one warning
//     "checkpoint: <source>="<text>" ignored: <why>", so a typo cannot
//     freeze a real job;
//   otherwise one warning that writes will stall, and a hook that at the
//     named stage of a generation of clock >= the point's logs
//     "checkpoint: stalled at <stage> writing gen-<clock> in <dir> (<source>)"
//     (<dir>: the shard's checkpoint folder, the parent of `tmp`) and then
//     never returns.
// The hook is safe to call from any thread.
CheckpointStageHook TestStallHook(std::string_view source, std::string_view text);

}  // namespace ps

#endif  // PS_SERVER_CHECKPOINT_STALL_H_
